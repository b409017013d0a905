package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/backup"
)

// newBackupCmd returns `flexkv backup`: consistent backups of a whole
// cluster (DESIGN 14).
func newBackupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup create|verify|restore|drop",
		Short: "Take, check and restore consistent backups of a whole cluster",
		Long: `A backup is one consistent cut of every group (DESIGN 14): a backup marker,
multicast to every group through the protocol in use, is delivered as a cut;
at it every replica of every group takes a checkpoint of its store holding
exactly the deliveries before it. No clock, no pause: transactions go on.

  flexkv backup create --to DIR      take a backup into DIR (new or empty)
  flexkv backup verify DIR           check DIR's files against its manifest
  flexkv backup restore --from DIR --config FILE --node ID --data-dir D
                                     seed one replica of a new cluster from DIR
  flexkv backup drop MARKER          drop the checkpoints of MARKER left behind

Exit codes: 0 done; 1 failed; 2 bad usage.`,
	}
	needSubcommand(cmd, "create, verify, restore or drop")
	cmd.AddCommand(newBackupCreateCmd(), newBackupVerifyCmd(), newBackupRestoreCmd(), newBackupDropCmd())
	return cmd
}

func newBackupCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create --to DIR",
		Short: "Take a consistent backup of the whole cluster into DIR",
		Long: `Ask the entry group's leader to multicast a backup marker to every group; at its
delivery every replica of every group checkpoints its store (Pebble hard links).
Then copy one replica's checkpoint per group (a follower's where one has it)
into DIR/GROUP over the client API, with TLS, streamed; write DIR/manifest.json
(cluster id, epoch, configuration, marker, each group's applied index at the
marker, every file with its size and SHA-256); and drop the checkpoints on the
replicas. DIR must not exist or be empty. Progress goes to stderr; the summary
(or with --json the manifest) to stdout. Only the user root may back up.`,
		Args: noArgs,
	}
	f := cmd.Flags()
	f.String("to", "", "the backup's directory: new, or empty (required)")
	f.String("config", "", "cluster configuration whose replicas to reach (default: the embedded "+defaultConfigName+")")
	f.String("endpoints", "", "gRPC addresses host:port,... of the cluster, instead of --config's")
	f.Duration("timeout", 10*time.Minute, "how long the whole backup may take")
	f.Bool("json", false, "print the manifest as JSON")
	f.Float64("rate", 0, "copy at most this many MB/s (10^6 bytes), to spare a loaded cluster (0: no limit)")
	addClientTLSFlags(f)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("backup create: %w", err)) })
	cmd.RunE = runBackupCreate
	return cmd
}

// backupOptions reads the connection flags of a backup command.
func backupOptions(c *cobra.Command) (backup.Options, error) {
	v := settings(c)
	var o backup.Options
	tlsCfg, err := clientTLS(v)
	if err != nil {
		return o, err
	}
	o.TLS = tlsCfg
	if e := v.GetString("endpoints"); e != "" {
		if v.GetString("config") != "" {
			return o, errors.New("--config and --endpoints: choose one")
		}
		o.Endpoints, err = parseEndpoints(e)
		return o, err
	}
	cfg, _, err := loadCluster(v.GetString("config"))
	if err != nil {
		return o, err
	}
	o.Endpoints = cfg.Endpoints()
	return o, nil
}

func runBackupCreate(c *cobra.Command, _ []string) error {
	v := settings(c)
	dir := v.GetString("to")
	if dir == "" {
		return usageError(errors.New("backup create: --to DIR is required"))
	}
	if err := backup.CheckEmptyDir(dir); err != nil {
		return usageError(fmt.Errorf("backup create: --to: %w", err))
	}
	o, err := backupOptions(c)
	if err != nil {
		return usageError(fmt.Errorf("backup create: %w", err))
	}
	if r := v.GetFloat64("rate"); r < 0 || r != r {
		return usageError(fmt.Errorf("backup create: --rate %v: want MB/s >= 0", r))
	}
	o.Dir, o.Progress, o.BytesPerSecond = dir, c.ErrOrStderr(), v.GetFloat64("rate")*1e6
	ctx, cancel := signalContext(c.Context())
	defer cancel()
	ctx, stop := context.WithTimeout(ctx, v.GetDuration("timeout"))
	defer stop()
	start := time.Now()
	m, err := backup.Create(ctx, o)
	if err != nil {
		return err
	}
	out := c.OutOrStdout()
	if v.GetBool("json") {
		return writeJSON(out, m)
	}
	fmt.Fprintf(out, "backup %s of cluster %s (epoch %d, %s) in %s: %d groups, %d bytes, %s\n",
		m.Marker, m.ClusterID, m.Epoch, m.Protocol, dir, len(m.Groups), m.Bytes(), time.Since(start).Round(time.Millisecond))
	for _, g := range m.Groups {
		fmt.Fprintf(out, "  %-14s applied index %-8d %3d files %10d bytes  from %s\n", g.Name, g.AppliedIndex, len(g.Files), g.Bytes, g.Replica)
	}
	return nil
}

func newBackupVerifyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify DIR",
		Short: "Check a backup's files against its manifest",
		Long: `Read DIR/manifest.json and check every file of every group: present, of its
size, with its SHA-256, and no file the manifest does not name. Every problem is
printed on stderr naming the group and the file (missing, truncated, longer,
corrupted, unexpected); the exit code is then 1.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(fmt.Errorf("backup verify: want one directory, got %d arguments", len(args)))
			}
			return nil
		},
	}
	cmd.Flags().Bool("json", false, "print the manifest as JSON")
	cmd.RunE = func(c *cobra.Command, args []string) error {
		m, err := backup.Verify(args[0])
		if err != nil {
			return err
		}
		if settings(c).GetBool("json") {
			return writeJSON(c.OutOrStdout(), m)
		}
		fmt.Fprintf(c.OutOrStdout(), "backup %s of cluster %s: %d groups, %d files, %d bytes: every file matches the manifest\n",
			m.Marker, m.ClusterID, len(m.Groups), countFiles(m), m.Bytes())
		return nil
	}
	return cmd
}

func countFiles(m *backup.Manifest) int {
	n := 0
	for _, g := range m.Groups {
		n += len(g.Files)
	}
	return n
}

func newBackupRestoreCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore --from DIR --config FILE --node ID --data-dir D",
		Short: "Seed one replica of a new cluster from a backup",
		Long: `Verify the backup in DIR, then seed the data directory D of replica ID of a new
cluster from its group's copy, like etcdutl snapshot restore: the store holds
the backup's user data; the cluster id is new (the same at every replica
restored from DIR with FILE); the epoch is 1 of FILE, which must map the same
partitions to the same groups as the backup (refused otherwise, naming each
difference); protocol state, sessions and channels are fresh. D must not exist
or be empty. Run it for every replica of FILE, then start each with
flexkv server --config FILE --node ID --data-dir D (--initial-cluster-state new).`,
		Args: noArgs,
	}
	f := cmd.Flags()
	f.String("from", "", "the backup's directory (required)")
	f.String("config", "", "the new cluster's configuration (required)")
	f.String("node", "", "the replica to seed (required)")
	f.String("data-dir", "", "its data directory: new, or empty (required)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("backup restore: %w", err)) })
	cmd.RunE = runBackupRestore
	return cmd
}

func runBackupRestore(c *cobra.Command, _ []string) error {
	v := settings(c)
	var missing []string
	for _, name := range []string{"from", "config", "node", "data-dir"} {
		if v.GetString(name) == "" {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		return usageError(fmt.Errorf("backup restore: %s required", strings.Join(missing, ", ")))
	}
	cfg, _, err := loadCluster(v.GetString("config"))
	if err != nil {
		return usageError(fmt.Errorf("backup restore: %w", err))
	}
	m, id, err := backup.Restore(backup.RestoreOptions{From: v.GetString("from"), Config: cfg, Node: v.GetString("node"), DataDir: v.GetString("data-dir")})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.OutOrStdout(), "replica %s seeded in %s from backup %s of cluster %s: new cluster %s, epoch %d\n",
		v.GetString("node"), v.GetString("data-dir"), m.Marker, m.ClusterID, id, backup.BootstrapEpoch)
	return nil
}

func newBackupDropCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drop MARKER",
		Short: "Drop the checkpoints of a backup marker on every replica",
		Long: `Drop checkpoint MARKER (the marker id "c<client>.<seq>" that backup create
printed) on every replica: those a backup create that stopped midway left
behind, or that a replica down at the time kept. Exit code 1 names the replicas
that did not answer.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(fmt.Errorf("backup drop: want one marker, got %d arguments", len(args)))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.String("config", "", "cluster configuration whose replicas to reach (default: the embedded "+defaultConfigName+")")
	f.String("endpoints", "", "gRPC addresses host:port,... of the cluster, instead of --config's")
	addClientTLSFlags(f)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		o, err := backupOptions(c)
		if err != nil {
			return usageError(fmt.Errorf("backup drop: %w", err))
		}
		o.Progress = c.ErrOrStderr()
		return backup.Drop(c.Context(), o, args[0])
	}
	return cmd
}
