package flexkvdb

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magiconair/properties"
)

func props(kv ...string) *properties.Properties {
	p := properties.NewProperties()
	for i := 0; i < len(kv); i += 2 {
		p.MustSet(kv[i], kv[i+1])
	}
	return p
}

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions(props(
		PropEndpoints, "127.0.0.1:1, 127.0.0.1:2",
		PropCerts, "/certs", PropUser, "alice",
		PropPrefix, "w/0001/", PropConsistency, "stale",
		PropTimeout, "3s", "threadcount", "100", "fieldcount", "1", "table", "t1",
	))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.1:1", "127.0.0.1:2"}; !slices.Equal(o.Client.Endpoints, want) {
		t.Errorf("endpoints %v, want %v", o.Client.Endpoints, want)
	}
	if o.Client.CertsDir != "/certs" || o.Client.User != "alice" || o.Client.Insecure {
		t.Errorf("TLS: certs %q user %q insecure %v", o.Client.CertsDir, o.Client.User, o.Client.Insecure)
	}
	if string(o.Prefix) != "w/0001/" || !o.Stale || o.Timeout != 3*time.Second || o.FieldCount != 1 || o.Table != "t1" {
		t.Errorf("options %+v", o)
	}
	if o.Client.Sessions != 100 {
		t.Errorf("sessions %d, want threadcount's 100", o.Client.Sessions)
	}
}

func TestParseOptionsDefaults(t *testing.T) {
	o, err := ParseOptions(props(PropEndpoints, "h:1", PropInsecure, "true"))
	if err != nil {
		t.Fatal(err)
	}
	if !o.Client.Insecure || o.Prefix != nil || o.Stale || o.Timeout != TimeoutDefault ||
		o.FieldCount != 10 || o.Table != "usertable" || o.Client.Sessions != 64 {
		t.Fatalf("defaults %+v", o)
	}
}

func TestParseOptionsConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	yaml := `protocol: flexcast
overlay: [g1]
groups:
  - name: g1
    replicas:
      - {id: r1, raft: "127.0.0.1:12101", grpc: "127.0.0.1:12201"}
      - {id: r2, raft: "127.0.0.1:12102", grpc: "127.0.0.1:12202"}
      - {id: r3, raft: "127.0.0.1:12103", grpc: "127.0.0.1:12203"}
partitions:
  - {name: p1, start: "a/", end: "b/", group: g1}
`
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := ParseOptions(props(PropConfig, path, PropInsecure, "true"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.1:12201", "127.0.0.1:12202", "127.0.0.1:12203"}; !slices.Equal(o.Client.Endpoints, want) {
		t.Fatalf("endpoints %v, want %v", o.Client.Endpoints, want)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(yaml+"colour: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseOptions(props(PropConfig, bad, PropInsecure, "true")); err == nil || !strings.Contains(err.Error(), PropConfig) {
		t.Fatalf("unknown field: %v, want an error naming %s", err, PropConfig)
	}
}

func TestParseOptionsBad(t *testing.T) {
	certs := t.TempDir()
	for _, tc := range []struct {
		name string
		kv   []string
		want string // the property the error must name
	}{
		{"no servers", []string{PropInsecure, "true"}, PropConfig},
		{"both server lists", []string{PropConfig, "x.yaml", PropEndpoints, "h:1", PropInsecure, "true"}, PropEndpoints},
		{"empty address", []string{PropEndpoints, "h:1,,h:2", PropInsecure, "true"}, PropEndpoints},
		{"missing config", []string{PropConfig, filepath.Join(certs, "none.yaml"), PropInsecure, "true"}, PropConfig},
		{"insecure not a bool", []string{PropEndpoints, "h:1", PropInsecure, "yes please"}, PropInsecure},
		{"insecure and certs", []string{PropEndpoints, "h:1", PropInsecure, "true", PropCerts, certs}, PropInsecure},
		{"empty certs", []string{PropEndpoints, "h:1", PropCerts, ""}, PropCerts},
		{"empty user", []string{PropEndpoints, "h:1", PropCerts, certs, PropUser, ""}, PropUser},
		{"consistency", []string{PropEndpoints, "h:1", PropInsecure, "true", PropConsistency, "strong"}, PropConsistency},
		{"empty prefix", []string{PropEndpoints, "h:1", PropInsecure, "true", PropPrefix, ""}, PropPrefix},
		{"timeout", []string{PropEndpoints, "h:1", PropInsecure, "true", PropTimeout, "soon"}, PropTimeout},
		{"negative timeout", []string{PropEndpoints, "h:1", PropInsecure, "true", PropTimeout, "-1s"}, PropTimeout},
		{"sessions", []string{PropEndpoints, "h:1", PropInsecure, "true", PropSessions, "0"}, PropSessions},
		{"fieldcount", []string{PropEndpoints, "h:1", PropInsecure, "true", "fieldcount", "ten"}, "fieldcount"},
		{"table", []string{PropEndpoints, "h:1", PropInsecure, "true", "table", "a/b"}, "table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseOptions(props(tc.kv...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseOptions(%v) = %v, want an error naming %s", tc.kv, err, tc.want)
			}
		})
	}
}

func TestParseOptionsNoCertificates(t *testing.T) {
	// Without flexkv.certs, and without flexkv local's certificates in the
	// working directory, the error says what to give.
	t.Chdir(t.TempDir())
	_, err := ParseOptions(props(PropEndpoints, "h:1"))
	if err == nil || !strings.Contains(err.Error(), PropCerts) || !strings.Contains(err.Error(), PropInsecure) {
		t.Fatalf("got %v, want an error naming %s and %s", err, PropCerts, PropInsecure)
	}
}
