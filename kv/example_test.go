package kv_test

import (
	"fmt"
	"log"
	"os"

	"github.com/flexkv/flexkv/kv"
)

// A replica executes each raft entry in one batch and commits it with the
// entry's index.
func Example() {
	dir, err := os.MkdirTemp("", "kv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := kv.Open(kv.Options{Dir: dir, NoSync: true})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	b := s.NewBatch()
	defer b.Close()
	if err := b.Put([]byte("w/0001/ytd"), []byte("300")); err != nil {
		log.Fatal(err)
	}
	v, _, err := b.Get([]byte("w/0001/ytd")) // the batch reads its own write
	if err != nil {
		log.Fatal(err)
	}
	if err := b.SetResult("client-7/42", []byte("ok")); err != nil {
		log.Fatal(err)
	}
	if err := s.Commit(b, 12); err != nil {
		log.Fatal(err)
	}
	res, found, err := s.Result("client-7/42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read %s; applied %d; result %s (%v)\n", v, s.AppliedIndex(), res, found)
	// Output: read 300; applied 12; result ok (true)
}
