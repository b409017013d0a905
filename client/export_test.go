package client

// StartExampleServer starts a fake cluster of three groups, a, b and c,
// owning the keys "a/...", "b/..." and "c/...", and returns the address of
// one of its servers.
func StartExampleServer() (endpoint string, stop func()) {
	cl, stop, err := startFake(fakeOptions{})
	if err != nil {
		panic(err)
	}
	return cl.endpoint(0, 0), stop
}
