package main

import (
	"strings"
	"testing"

	"github.com/magiconair/properties"
)

func TestZipfianInsertWarning(t *testing.T) {
	for _, tc := range []struct {
		name  string
		props map[string]string
		warn  bool
	}{
		{"D with zipfian", map[string]string{"dotransactions": "true", "requestdistribution": "zipfian", "insertproportion": "0.05"}, true},
		{"D as written (latest)", map[string]string{"dotransactions": "true", "requestdistribution": "latest", "insertproportion": "0.05"}, false},
		{"A with zipfian, no inserts", map[string]string{"dotransactions": "true", "requestdistribution": "zipfian", "readproportion": "0.5"}, false},
		{"E uniform with inserts", map[string]string{"dotransactions": "true", "insertproportion": "0.05"}, false},
		{"the load of a zipfian workload", map[string]string{"dotransactions": "false", "requestdistribution": "zipfian", "insertproportion": "0.05"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := zipfianInsertWarning(properties.LoadMap(tc.props))
			if got := w != ""; got != tc.warn {
				t.Fatalf("warning %q, want one: %v", w, tc.warn)
			}
			if tc.warn && !strings.Contains(w, "READ_ERROR") {
				t.Fatalf("warning %q does not name READ_ERROR", w)
			}
		})
	}
}
