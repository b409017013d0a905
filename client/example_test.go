package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/txn"
)

// A client for the cluster of configs/local.yaml (`flexkv local`): put,
// get, and a transfer between two warehouses that lie in two groups.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{
		Endpoints: []string{"127.0.0.1:7201", "127.0.0.1:7204"},
		Region:    "eu-west-1",
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
		out, _ := res.MarshalJSON()
		fmt.Println(string(out))
	}
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
