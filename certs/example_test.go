package certs_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/flexkv/flexkv/certs"
)

// Example makes a cluster's certificates and the TLS configurations a
// replica and a client use.
func Example() {
	tmp, err := os.MkdirTemp("", "flexkv-certs")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	dir, caKey := filepath.Join(tmp, "certs"), filepath.Join(tmp, "ca.key")

	ca, err := certs.CreateCA(dir, caKey, certs.Options{})
	if err != nil {
		log.Fatal(err)
	}
	id := certs.NodeID{Group: "eu-west-1", Replica: "r1"}
	if _, err := ca.CreateNode(dir, id, []string{"127.0.0.1", "r1.example"}, certs.Options{}); err != nil {
		log.Fatal(err)
	}
	if _, err := ca.CreateClient(dir, "root", certs.Options{}); err != nil {
		log.Fatal(err)
	}

	node, err := certs.LoadNode(dir, "r1")
	if err != nil {
		log.Fatal(err)
	}
	client, err := certs.LoadClient(dir, "root")
	if err != nil {
		log.Fatal(err)
	}
	_ = certs.ServerConfig(node)   // the client API's listener
	_ = certs.NodeConfig(node)     // links between groups, both ways
	_ = certs.GroupConfig(node)    // raft inside eu-west-1
	_ = certs.ClientConfig(client) // a client of the API, as root
	fmt.Println(node.ID.URI(), client.User)

	entries, err := certs.List(dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.File, e.Kind, e.Subject, e.Chains)
	}
	// Output:
	// flexkv://eu-west-1/r1 root
	// ca.crt ca FlexKV CA true
	// client.root.crt client root true
	// node.r1.crt node eu-west-1/r1 true
}
