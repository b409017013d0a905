package main

import (
	"crypto/x509"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/partition"
)

// certExitFailed is the exit code of a refused or failed `flexkv cert`
// command (a file exists, a key is open to others, I/O failed); bad usage
// or configuration exits 2 (usageError), as `flexkv kv` does: a script
// tells a typo from a refusal.
const certExitFailed = 1

// newCertCmd returns `flexkv cert` and its subcommands create-ca,
// create-node, create-client and list (DESIGN 13).
func newCertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:           "cert create-ca|create-node|create-client|list ...",
		SilenceUsage:  true,
		SilenceErrors: true, // main prints the error once
		Short:         "Create and list the certificates of a FlexKV cluster",
		Long: `Create and list the certificates of a cluster (DESIGN 13): one CA, a node
certificate per replica, a client certificate per user, all in --certs-dir.

  flexkv cert create-ca --certs-dir DIR --ca-key FILE
  flexkv cert create-node ID [HOST...] --config FILE --certs-dir DIR --ca-key FILE
  flexkv cert create-client NAME --certs-dir DIR --ca-key FILE
  flexkv cert list --certs-dir DIR [--json]
  flexkv cert create-cluster --config FILE --certs-dir DIR --ca-key FILE [--user NAME...]

The certs directory holds ca.crt, node.ID.crt + node.ID.key and
client.NAME.crt + client.NAME.key; keys have mode 0600. The CA's private key
is written to --ca-key, which belongs outside the certs directory: that
directory goes to every node, the CA key stays with whoever signs. No file is
replaced unless --overwrite is given.

Flags may also come from the environment: FLEXKV_CERTS_DIR, FLEXKV_CA_KEY,
FLEXKV_CONFIG.

Exit codes: 0 ok; 1 refused or failed (a file exists, a key is open to
others, a file cannot be read or written); 2 bad usage or configuration
(nothing was written).`,
	}
	needSubcommand(cmd, "create-ca, create-node, create-client or list")
	cmd.PersistentFlags().String("certs-dir", "", "directory of the cluster's certificates (required; or FLEXKV_CERTS_DIR)")
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError(fmt.Errorf("%s: %w", certName(c), err))
	})
	cmd.AddCommand(newCertCreateCACmd(), newCertCreateNodeCmd(), newCertCreateClientCmd(), newCertCreateClusterCmd(), newCertListCmd())
	return cmd
}

// certName names a cert command in errors: "cert create-node".
func certName(c *cobra.Command) string {
	if p := c.Parent(); p != nil && p.Name() == "cert" {
		return "cert " + c.Name()
	}
	return c.Name()
}

// certArgs checks the number of positional arguments: at least len(names),
// and no more unless more is set; the error shows usage.
func certArgs(usage string, more bool, names ...string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) == len(names) || more && len(args) > len(names) {
			return nil
		}
		if len(names) == 0 {
			return usageError(fmt.Errorf("%s: want no arguments, got %d (%q)", certName(c), len(args), args))
		}
		return usageError(fmt.Errorf("%s: want %s, got %d arguments", certName(c), usage, len(args)))
	}
}

// certFlags are the settings of a create command.
type certFlags struct {
	dir, caKey string
	opt        certs.Options
}

// createFlags reads --certs-dir, --ca-key and --overwrite, which every
// create command requires or takes.
func createFlags(c *cobra.Command) (*viper.Viper, certFlags, error) {
	v := settings(c)
	f := certFlags{dir: v.GetString("certs-dir"), caKey: v.GetString("ca-key")}
	f.opt.Overwrite = v.GetBool("overwrite")
	if f.dir == "" {
		return v, f, usageError(fmt.Errorf("%s: --certs-dir is required (or FLEXKV_CERTS_DIR)", certName(c)))
	}
	if f.caKey == "" {
		return v, f, usageError(fmt.Errorf("%s: --ca-key is required (or FLEXKV_CA_KEY): the CA's private key file, outside --certs-dir", certName(c)))
	}
	return v, f, nil
}

func addCreateFlags(cmd *cobra.Command, caKeyHelp string) {
	cmd.Flags().String("ca-key", "", caKeyHelp)
	cmd.Flags().Bool("overwrite", false, "replace existing files (without it, an existing file is an error)")
}

// certFailed makes err, from package certs once the arguments are checked,
// the command's error: a refusal or a failure, exit 1.
func certFailed(c *cobra.Command, err error) error {
	return &exitError{code: certExitFailed, err: fmt.Errorf("%s: %w", certName(c), err)}
}

// checkNames checks names (what: value pairs) before anything is read or
// written: a bad name is a usage error.
func checkNames(c *cobra.Command, pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := certs.CheckName(pairs[i], pairs[i+1]); err != nil {
			return usageError(fmt.Errorf("%s: %w", certName(c), err))
		}
	}
	return nil
}

func newCertCreateCACmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create-ca --certs-dir DIR --ca-key FILE [--overwrite]",
		Short: "Create the cluster CA: DIR/ca.crt and its key in FILE",
		Long: `Create the cluster CA, valid 10 years: its certificate DIR/ca.crt (mode 0644),
which every node and client trusts, and its private key FILE (mode 0600),
which signs node and client certificates and should stay off the nodes.
Replacing the CA (--overwrite) invalidates every certificate it signed.`,
		Args: certArgs("no arguments", false),
		RunE: func(c *cobra.Command, _ []string) error {
			_, f, err := createFlags(c)
			if err != nil {
				return err
			}
			if inside(f.caKey, f.dir) {
				fmt.Fprintf(c.ErrOrStderr(), "flexkv: warning: --ca-key %s is inside --certs-dir %s, which is copied to every node: keep the CA key elsewhere\n",
					f.caKey, f.dir)
			}
			ca, err := certs.CreateCA(f.dir, f.caKey, f.opt)
			if err != nil {
				return certFailed(c, err)
			}
			fmt.Fprintf(c.OutOrStdout(), "created %s and %s: CA, valid until %s\n",
				filepath.Join(f.dir, certs.CAFile), f.caKey, day(ca.Cert.NotAfter))
			return nil
		},
	}
	addCreateFlags(cmd, "file to write the CA's private key to (required; or FLEXKV_CA_KEY), outside --certs-dir")
	return cmd
}

// certHosts returns the DNS and IP names of cert.
func certHosts(cert *x509.Certificate) []string {
	hosts := append([]string(nil), cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	return hosts
}

// inside reports whether file is directly in dir.
func inside(file, dir string) bool {
	f, err1 := filepath.Abs(filepath.Dir(file))
	d, err2 := filepath.Abs(dir)
	return err1 == nil && err2 == nil && f == d
}

// day formats t for the summaries: the day is what an operator plans by.
func day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

func newCertCreateNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create-node ID [HOST...] [--config FILE | --group GROUP] --certs-dir DIR --ca-key FILE [--overwrite]",
		Short: "Create the certificate of replica ID: DIR/node.ID.crt and .key",
		Long: `Create the certificate of the replica ID of the cluster configuration FILE,
valid 5 years, signed by the CA (DIR/ca.crt and its key FILE): DIR/node.ID.crt
(mode 0644) and DIR/node.ID.key (mode 0600). It names the replica and its
group as flexkv://GROUP/REPLICA, the group being the one the configuration
puts ID in, and lists as DNS or IP names the hosts of the replica's raft and
gRPC addresses (but 0.0.0.0 and ::) followed by every HOST given: the names
clients and peers dial it by. It serves as a server and as a client
certificate, since nodes dial each other.

A member that is not in the configuration, to be added to a running
cluster (flexkv member add, DESIGN 14), takes its group from --group GROUP
(a group of the configuration) and its hosts from the HOSTs given, at least
one: make its certificate before it joins.`,
		Args: certArgs("ID [HOST...]", true, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			v, f, err := createFlags(c)
			if err != nil {
				return err
			}
			id := args[0]
			if err := checkNames(c, "replica", id); err != nil {
				return err
			}
			configPath := v.GetString("config")
			cfg, _, err := loadCluster(configPath)
			if err != nil {
				return usageError(fmt.Errorf("%s: %w", certName(c), err))
			}
			if configPath == "" {
				configPath = defaultConfigName
			}
			group, replica, ok := cfg.Replica(id)
			var hosts []string
			switch g := v.GetString("group"); {
			case g != "" && ok && g != group.Name:
				return usageError(fmt.Errorf("%s: --group %s: replica %q is a replica of group %s in the configuration %s",
					certName(c), g, id, group.Name, configPath))
			case g != "" && !ok:
				// A member added to a running cluster (flexkv member add):
				// not in the bootstrap file, dialled by the hosts given.
				i := slices.IndexFunc(cfg.Groups, func(gc partition.GroupConfig) bool { return gc.Name == g })
				if i < 0 {
					return usageError(fmt.Errorf("%s: --group %q is not a group of the configuration %s (groups: %s)",
						certName(c), g, configPath, strings.Join(configGroupNames(cfg), ", ")))
				}
				if len(args) < 2 {
					return usageError(fmt.Errorf("%s: %s is not in the configuration %s: give the HOSTs it is dialled by (its raft and grpc addresses' hosts)",
						certName(c), id, configPath))
				}
				group = cfg.Groups[i]
			case !ok:
				return usageError(fmt.Errorf("%s: replica %q is not in the configuration %s (replicas: %s); a member not in it needs --group GROUP and its HOSTs",
					certName(c), id, configPath, strings.Join(cfg.ReplicaIDs(), ", ")))
			default:
				if hosts, err = certs.HostsOf(replica.Hosts()...); err != nil {
					return usageError(fmt.Errorf("%s: replica %s: %w", certName(c), id, err))
				}
			}
			for _, h := range args[1:] {
				if err := certs.CheckHost(h); err != nil {
					return usageError(fmt.Errorf("%s: %w", certName(c), err))
				}
			}
			hosts = append(hosts, args[1:]...)
			ca, err := certs.LoadCA(f.dir, f.caKey)
			if err != nil {
				return certFailed(c, err)
			}
			cert, err := ca.CreateNode(f.dir, certs.NodeID{Group: group.Name, Replica: id}, hosts, f.opt)
			if err != nil {
				return certFailed(c, err)
			}
			fmt.Fprintf(c.OutOrStdout(), "created %s and %s: node %s/%s, hosts %s, valid until %s\n",
				filepath.Join(f.dir, certs.NodeCertFile(id)), filepath.Join(f.dir, certs.NodeKeyFile(id)),
				group.Name, id, strings.Join(certHosts(cert), ","), day(cert.NotAfter))
			return nil
		},
	}
	cmd.Flags().String("config", "", "cluster configuration YAML that places ID in its group (default: embedded "+defaultConfigName+")")
	cmd.Flags().String("group", "", "the group of a member not in the configuration (flexkv member add); its hosts are the HOSTs given")
	addCreateFlags(cmd, "the CA's private key file (required; or FLEXKV_CA_KEY)")
	return cmd
}

func newCertCreateClientCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create-client NAME --certs-dir DIR --ca-key FILE [--overwrite]",
		Short: "Create the certificate of user NAME: DIR/client.NAME.crt and .key",
		Long: `Create the client certificate of user NAME (its CN), valid 5 years, signed by
the CA (DIR/ca.crt and its key FILE): DIR/client.NAME.crt (mode 0644) and
DIR/client.NAME.key (mode 0600). It authenticates a client to the client API
and cannot serve.`,
		Args: certArgs("NAME", false, "NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			_, f, err := createFlags(c)
			if err != nil {
				return err
			}
			user := args[0]
			if err := checkNames(c, "user", user); err != nil {
				return err
			}
			ca, err := certs.LoadCA(f.dir, f.caKey)
			if err != nil {
				return certFailed(c, err)
			}
			cert, err := ca.CreateClient(f.dir, user, f.opt)
			if err != nil {
				return certFailed(c, err)
			}
			fmt.Fprintf(c.OutOrStdout(), "created %s and %s: client %s, valid until %s\n",
				filepath.Join(f.dir, certs.ClientCertFile(user)), filepath.Join(f.dir, certs.ClientKeyFile(user)), user, day(cert.NotAfter))
			return nil
		},
	}
	addCreateFlags(cmd, "the CA's private key file (required; or FLEXKV_CA_KEY)")
	return cmd
}

func newCertCreateClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create-cluster --config FILE --certs-dir DIR --ca-key FILE [--user NAME...]",
		Short: "Create what DIR lacks of a cluster's certificates: the CA, every replica's, the users'",
		Long: `Create, in DIR, every certificate a cluster of configuration FILE runs secure
with that DIR does not hold yet: the CA (its key in FILE of --ca-key) unless
DIR/ca.crt exists, a node certificate for every replica of the configuration
(hosts: those of its raft, grpc and peer addresses), and a client certificate
for every --user (default root). Existing files are kept, so that it may run
at every start of a deployment (docker-compose's certs service does).`,
		Args: certArgs("no arguments", false),
		RunE: func(c *cobra.Command, _ []string) error {
			v, f, err := createFlags(c)
			if err != nil {
				return err
			}
			users, err := c.Flags().GetStringSlice("user")
			if err != nil {
				return usageError(err)
			}
			if err := checkNames(c, userPairs(users)...); err != nil {
				return err
			}
			cfg, _, err := loadCluster(v.GetString("config"))
			if err != nil {
				return usageError(fmt.Errorf("%s: %w", certName(c), err))
			}
			nodes, err := cluster.NodeSpecs(cfg)
			if err != nil {
				return usageError(fmt.Errorf("%s: %w", certName(c), err))
			}
			created, err := certs.EnsureCluster(f.dir, f.caKey, nodes, users)
			for _, file := range created {
				fmt.Fprintf(c.OutOrStdout(), "created %s\n", file)
			}
			if err != nil {
				return certFailed(c, err)
			}
			fmt.Fprintf(c.OutOrStdout(), "%s: %d files created; %d nodes and %d users in all\n", f.dir, len(created), len(nodes), len(users))
			return nil
		},
	}
	cmd.Flags().String("ca-key", "", "the CA's private key file: read, or written with a new CA (required; or FLEXKV_CA_KEY)")
	cmd.Flags().String("config", "", "cluster configuration file (default: the embedded configs/local.yaml; or FLEXKV_CONFIG)")
	cmd.Flags().StringSlice("user", []string{cluster.RootUser}, "users to create a client certificate for")
	return cmd
}

func userPairs(users []string) []string {
	var out []string
	for _, u := range users {
		out = append(out, "user", u)
	}
	return out
}

// certListEntry is one certificate of `cert list --json`.
type certListEntry struct {
	File     string   `json:"file"`
	Kind     string   `json:"kind,omitempty"`
	Subject  string   `json:"subject,omitempty"`
	Hosts    []string `json:"hosts,omitempty"`
	NotAfter string   `json:"not_after,omitempty"`
	// DaysLeft is the whole days until NotAfter, negative once expired:
	// what to renew first (an alert fires at 30, deploy/prometheus).
	DaysLeft *int   `json:"days_left,omitempty"`
	Chains   bool   `json:"chains"`
	Problem  string `json:"problem,omitempty"`
}

func newCertListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list --certs-dir DIR [--json]",
		Short: "List the certificates of DIR: kind, subject, hosts, expiry, chain to ca.crt",
		Long: `List every certificate (*.crt) of DIR, one line each: its file, kind (ca, node
or client), subject (the CA's name, a node's GROUP/REPLICA, a client's user),
hosts (a node's DNS and IP names), expiry (not after, UTC, and the whole days
left, negative once expired), whether it chains
to DIR/ca.crt now, and the first problem found (expired, another CA, a file
name that does not match what the certificate names), or - for none.
With --json: {"certs":[{"file":...,"kind":...,"subject":...,"hosts":[...],
"not_after":...,"days_left":...,"chains":true,"problem":...}]}. Problems are reported, not
errors: the exit code is 0 when DIR can be read.`,
		Args: certArgs("no arguments", false),
		RunE: func(c *cobra.Command, _ []string) error {
			v := settings(c)
			dir := v.GetString("certs-dir")
			if dir == "" {
				return usageError(fmt.Errorf("%s: --certs-dir is required (or FLEXKV_CERTS_DIR)", certName(c)))
			}
			entries, err := certs.List(dir)
			if err != nil {
				return certFailed(c, err)
			}
			out := make([]certListEntry, len(entries))
			for i, e := range entries {
				out[i] = certListEntry{File: e.File, Subject: e.Subject, Hosts: e.Hosts, Chains: e.Chains, Problem: e.Problem}
				if e.Kind != 0 {
					out[i].Kind = e.Kind.String()
				}
				if !e.NotAfter.IsZero() {
					out[i].NotAfter = e.NotAfter.UTC().Format(time.RFC3339)
					days := int(math.Floor(time.Until(e.NotAfter).Hours() / 24))
					out[i].DaysLeft = &days
				}
			}
			if asJSON {
				return writeJSON(c.OutOrStdout(), struct {
					Certs []certListEntry `json:"certs"`
				}{out})
			}
			return printCertList(c.OutOrStdout(), out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"certs":[{"file":...,"kind":...,...}]}`)
	return cmd
}

func printCertList(w io.Writer, entries []certListEntry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tKIND\tSUBJECT\tHOSTS\tNOT-AFTER\tDAYS-LEFT\tCHAINS\tPROBLEM")
	for _, e := range entries {
		chains := "no"
		if e.Chains {
			chains = "yes"
		}
		days := "-"
		if e.DaysLeft != nil {
			days = strconv.Itoa(*e.DaysLeft)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.File, dash(e.Kind), dash(e.Subject),
			dash(strings.Join(e.Hosts, ",")), dash(e.NotAfter), days, chains, dash(e.Problem))
	}
	return tw.Flush()
}

// dash stands for an empty column.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// configGroupNames returns the names of cfg's groups, in its order.
func configGroupNames(cfg *partition.ClusterConfig) []string {
	out := make([]string, len(cfg.Groups))
	for i, g := range cfg.Groups {
		out[i] = g.Name
	}
	return out
}
