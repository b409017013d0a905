package flexkvdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/magiconair/properties"
	"go.yaml.in/yaml/v3"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/partition"
)

// The binding's properties (README.md, Properties). go-ycsb passes every
// property of its command line and workload files; those of this binding
// start with "flexkv.".
const (
	PropConfig      = "flexkv.config"
	PropEndpoints   = "flexkv.endpoints"
	PropCerts       = "flexkv.certs"
	PropUser        = "flexkv.user"
	PropInsecure    = "flexkv.insecure"
	PropPrefix      = "flexkv.prefix"
	PropConsistency = "flexkv.consistency"
	PropRegion      = "flexkv.region"
	PropSessions    = "flexkv.sessions"
	PropTimeout     = "flexkv.timeout"
)

// The go-ycsb properties the binding reads too.
const (
	propTable       = "table"       // the default table of the workload
	propFieldCount  = "fieldcount"  // fields of a record
	propThreadCount = "threadcount" // concurrent operations
)

// Values of PropConsistency.
const (
	// ConsistencyLinearizable reads at the leader of the key's group,
	// after a read index (client.Client.Get): the default.
	ConsistencyLinearizable = "linearizable"
	// ConsistencyStale reads at any replica, as it is
	// (client.Client.GetStale).
	ConsistencyStale = "stale"
)

// TimeoutDefault bounds one operation of a Config that sets no
// PropTimeout.
const TimeoutDefault = 30 * time.Second

// localCertsDir is where `flexkv local` writes its certificates with its
// default data directory: the default of PropCerts when it exists, as for
// the flexkv command's --certs-dir (cluster.CertsDir of flexkv-data/local,
// which this package does not import: it would link the servers in).
var localCertsDir = filepath.Join("flexkv-data", "local", "certs")

// Options are the binding's settings, parsed from go-ycsb's properties.
type Options struct {
	Client client.Config
	// Prefix starts every key; nil: the start of the cluster's first
	// partition that one group owns.
	Prefix []byte
	// Table is the workload's table; FieldCount its records' fields.
	Table      string
	FieldCount int
	// Stale reads with GetStale instead of Get.
	Stale   bool
	Timeout time.Duration
}

// ParseOptions returns the Options of the properties p, or an error naming
// the property that is missing or wrong.
func ParseOptions(p *properties.Properties) (Options, error) {
	var o Options
	var err error
	if o.Client.Endpoints, err = endpoints(p); err != nil {
		return o, err
	}
	if err := parseTLS(p, &o.Client); err != nil {
		return o, err
	}
	o.Client.Region = p.GetString(PropRegion, "")
	if s, ok := p.Get(PropPrefix); ok {
		if s == "" {
			return o, fmt.Errorf("flexkvdb: property %s is empty: give a key prefix, or leave the property out for the cluster's first partition", PropPrefix)
		}
		o.Prefix = []byte(s)
	}
	switch c := p.GetString(PropConsistency, ConsistencyLinearizable); c {
	case ConsistencyLinearizable:
	case ConsistencyStale:
		o.Stale = true
	default:
		return o, fmt.Errorf("flexkvdb: property %s=%q: want %s or %s", PropConsistency, c, ConsistencyLinearizable, ConsistencyStale)
	}
	o.Table = p.GetString(propTable, "usertable")
	if err := checkTable(o.Table); err != nil {
		return o, fmt.Errorf("flexkvdb: property %s: %w", propTable, err)
	}
	if o.FieldCount, err = intProp(p, propFieldCount, 10, 1, recordFieldsMax); err != nil {
		return o, err
	}
	threads, err := intProp(p, propThreadCount, 1, 1, client.SessionsMax)
	if err != nil {
		return o, err
	}
	if o.Client.Sessions, err = intProp(p, PropSessions, max(client.SessionsDefault, threads), 1, client.SessionsMax); err != nil {
		return o, err
	}
	o.Timeout = TimeoutDefault
	if s, ok := p.Get(PropTimeout); ok {
		if o.Timeout, err = time.ParseDuration(s); err != nil || o.Timeout <= 0 {
			return o, fmt.Errorf("flexkvdb: property %s=%q: want a positive duration such as 10s", PropTimeout, s)
		}
	}
	return o, nil
}

// endpoints returns the servers to dial: PropEndpoints, or every replica
// of the cluster configuration PropConfig.
func endpoints(p *properties.Properties) ([]string, error) {
	path, hasConfig := p.Get(PropConfig)
	list, hasList := p.Get(PropEndpoints)
	switch {
	case hasConfig && hasList:
		return nil, fmt.Errorf("flexkvdb: properties %s and %s: give one", PropConfig, PropEndpoints)
	case hasList:
		var out []string
		for e := range strings.SplitSeq(list, ",") {
			if e = strings.TrimSpace(e); e == "" {
				return nil, fmt.Errorf("flexkvdb: property %s=%q: an empty address", PropEndpoints, list)
			}
			out = append(out, e)
		}
		return out, nil
	case hasConfig:
		cfg, err := loadConfig(path)
		if err != nil {
			return nil, fmt.Errorf("flexkvdb: property %s: %w", PropConfig, err)
		}
		return cfg.Endpoints(), nil
	}
	return nil, fmt.Errorf("flexkvdb: no servers: give property %s (the cluster's YAML) or %s (host:port,...)", PropConfig, PropEndpoints)
}

// loadConfig reads the cluster configuration at path strictly (an unknown
// field is an error), as the flexkv command does, and validates it.
func loadConfig(path string) (*partition.ClusterConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var cfg partition.ClusterConfig
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &cfg, nil
}

// parseTLS sets the TLS fields of cfg (DESIGN 13: TLS unless told
// otherwise): PropInsecure, or the certificates of PropCerts (by default
// those of `flexkv local` when they exist) and PropUser.
func parseTLS(p *properties.Properties, cfg *client.Config) error {
	insecure, err := boolProp(p, PropInsecure, false)
	if err != nil {
		return err
	}
	dir, hasDir := p.Get(PropCerts)
	user, hasUser := p.Get(PropUser)
	switch {
	case insecure && (hasDir || hasUser):
		return fmt.Errorf("flexkvdb: property %s=true with %s or %s: choose plaintext or TLS", PropInsecure, PropCerts, PropUser)
	case insecure:
		cfg.Insecure = true
		return nil
	case hasDir && dir == "":
		return fmt.Errorf("flexkvdb: property %s is empty", PropCerts)
	case !hasDir:
		if _, err := os.Stat(localCertsDir); err != nil {
			return fmt.Errorf("flexkvdb: no certificates: give property %s (a directory of ca.crt and client.USER.crt/.key, as flexkv cert writes it), or %s=true for a cluster started with --insecure", PropCerts, PropInsecure)
		}
		dir = localCertsDir
	}
	if hasUser && user == "" {
		return fmt.Errorf("flexkvdb: property %s is empty", PropUser)
	}
	cfg.CertsDir, cfg.User = dir, user
	return nil
}

// boolProp returns the boolean property name, def when it is not set.
func boolProp(p *properties.Properties, name string, def bool) (bool, error) {
	s, ok := p.Get(name)
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("flexkvdb: property %s=%q: want true or false", name, s)
	}
	return v, nil
}

// intProp returns the integer property name, def when it is not set; it
// must lie in [lo, hi].
func intProp(p *properties.Properties, name string, def, lo, hi int) (int, error) {
	s, ok := p.Get(name)
	if !ok {
		return def, nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("flexkvdb: property %s=%q: want an integer in [%d, %d]", name, s, lo, hi)
	}
	return v, nil
}

// checkTable refuses a table name that would make two tables' keys meet:
// a table's keys are PREFIX TABLE "/" KEY.
func checkTable(table string) error {
	switch {
	case table == "":
		return errors.New("empty table name")
	case strings.ContainsRune(table, '/'):
		return fmt.Errorf("table name %q holds '/', the separator of table and key", table)
	}
	return nil
}
