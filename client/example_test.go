package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/txn"
)

// Connect to a cluster that runs TLS, as clusters do by default, with the
// certificates it was given: here a one-group cluster started for the
// example, which stands in for `flexkv local` (its endpoints are
// 127.0.0.1:7201, 127.0.0.1:7204 and 127.0.0.1:7207, its certificates
// directory flexkv-data/local/certs). Then put, get, and a transaction
// that moves 5 from one warehouse to another.
func Example() {
	local, stop, err := startCluster(false)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			log.Print(err)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{
		Endpoints: local.Endpoints(), // []string{"127.0.0.1:7201", "127.0.0.1:7204", "127.0.0.1:7207"}
		CertsDir:  local.CertsDir(),  // "flexkv-data/local/certs"
		User:      "root",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if err := c.Put(ctx, []byte("w/0001/acct"), []byte("100")); err != nil {
		log.Fatal(err)
	}
	v, found, err := c.Get(ctx, []byte("w/0001/acct"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("w/0001/acct = %s (found: %v)\n", v, found)

	tx, err := txn.ParseJSON([]byte(`{
		"if":   [{"key":"w/0001/acct","cmp":">=","int":5}],
		"then": [{"op":"add","key":"w/0001/acct","int":-5},{"op":"add","key":"w/0002/acct","int":5}],
		"else": []}`))
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Txn(ctx, tx)
	switch {
	case errors.Is(err, txn.ErrAborted):
		fmt.Println("aborted:", err)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("succeeded:", res.Succeeded)
		for _, r := range res.Results {
			fmt.Printf("%s %s -> %d\n", r.Kind, r.Key, r.Int)
		}
	}
	// Output:
	// w/0001/acct = 100 (found: true)
	// succeeded: true
	// add w/0001/acct -> 95
	// add w/0002/acct -> 5
}

// A cluster started with --insecure runs without TLS: say Insecure. A
// client that disagrees with the cluster on TLS, either way, gets a
// TLSMismatchError that says which Config field to set.
func ExampleConfig_insecure() {
	local, stop, err := startCluster(true)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			log.Print(err)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = client.New(ctx, client.Config{Endpoints: local.Endpoints(), TLS: &tls.Config{MinVersion: tls.VersionTLS13}})
	if te := (*client.TLSMismatchError)(nil); errors.As(err, &te) {
		fmt.Println("with TLS: the cluster runs TLS:", te.ClusterTLS)
	}

	c, err := client.New(ctx, client.Config{Endpoints: local.Endpoints(), Insecure: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(ctx, []byte("w/0002/name"), []byte("Lyon")); err != nil {
		log.Fatal(err)
	}
	v, _, err := c.Get(ctx, []byte("w/0002/name"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("insecure: w/0002/name =", string(v))
	// Output:
	// with TLS: the cluster runs TLS: false
	// insecure: w/0002/name = Lyon
}

// A transfer between groups a and c of a test cluster. The destinations
// answer in any order; each comes with its latency.
func ExampleClient_Txn() {
	endpoint, stop := client.StartExampleServer()
	defer stop()
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Endpoints: []string{endpoint}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if err := c.Put(ctx, []byte("a/acct"), []byte("7")); err != nil {
		log.Fatal(err)
	}
	tx, err := txn.ParseJSON([]byte(`{
		"if":   [{"key":"a/acct","cmp":">=","int":5}],
		"then": [{"op":"add","key":"a/acct","int":-5},{"op":"add","key":"c/acct","int":5}]}`))
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Txn(ctx, tx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("succeeded:", res.Succeeded)
	for _, r := range res.Results {
		fmt.Printf("%s %s -> %d\n", r.Kind, r.Key, r.Int)
	}
	var groups []string
	for _, d := range res.Destinations {
		groups = append(groups, d.Group)
	}
	slices.Sort(groups)
	fmt.Println("answered:", groups)

	v, _, err := c.Get(ctx, []byte("c/acct"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("c/acct =", string(v))
	// Output:
	// succeeded: true
	// add a/acct -> 2
	// add c/acct -> 5
	// answered: [a c]
	// c/acct = 5
}
