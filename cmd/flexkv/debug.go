package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/rpcflow"
)

// newDebugCmd returns `flexkv debug`, what support asks for (DESIGN 11).
func newDebugCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "debug bundle",
		Short: "Gather what support asks for first about a cluster",
		Args:  noArgs,
	}
	needSubcommand(cmd, "bundle")
	cmd.AddCommand(newDebugBundleCmd())
	return cmd
}

func newDebugBundleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bundle --to FILE",
		Short: "Write every replica's status, metrics, recent logs and settings into one tar.gz",
		Long: `Ask every replica of the configuration (or of --endpoints) for its status, its
metrics, its most recent log lines and its settings, and write them into one
gzipped tar archive FILE, as CockroachDB's debug zip does: the first thing
support asks for. Inside, under flexkv-debug-TIME/:

  manifest.json                  when, the replicas asked, which answered
  GROUP/REPLICA/status.json      as flexkv status --json reads it
  GROUP/REPLICA/metrics.txt      Prometheus text, as its /metrics serves it
  GROUP/REPLICA/logs.txt         its recent slog lines (info and up)
  GROUP/REPLICA/settings.json    node, directories, bounds, certificates
                                 (files and expiry), canonical configuration
  GROUP/REPLICA/error.txt        instead, for a replica that did not answer

No key and no certificate is in it: a replica's settings name its
certificate files and their expiry only. An existing FILE is not replaced.
Exit codes: 0 every replica answered; 1 the archive was written without
some (named on stderr); 2 bad usage; 3 no replica answered.`,
		Args: noArgs,
		RunE: runDebugBundle,
	}
	f := cmd.Flags()
	f.String("to", "", "the archive to write (required; .tar.gz)")
	f.String("config", "", "cluster configuration file (YAML); default: the embedded configs/local.yaml")
	f.String("endpoints", "", "gRPC addresses host:port,... to ask instead of the configuration's replicas")
	f.Duration("timeout", 10*time.Second, "how long each replica has to answer")
	addClientTLSFlags(f)
	return cmd
}

// bundlePart is one replica's part of a bundle.
type bundlePart struct {
	Group   string `json:"group"`
	Replica string `json:"replica"`
	Address string `json:"address"`
	Error   string `json:"error,omitempty"`

	resp *apipb.DebugResponse
}

func runDebugBundle(c *cobra.Command, _ []string) error {
	v := settings(c)
	to := v.GetString("to")
	if to == "" {
		return usageError(errors.New("debug bundle: --to FILE is required"))
	}
	if _, err := os.Stat(to); err == nil {
		return usageError(fmt.Errorf("debug bundle: %s exists: give another --to", to))
	}
	tlsCfg, err := clientTLS(v)
	if err != nil {
		return usageError(fmt.Errorf("debug bundle: %w", err))
	}
	parts, err := bundleParts(v.GetString("config"), v.GetString("endpoints"))
	if err != nil {
		return usageError(fmt.Errorf("debug bundle: %w", err))
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			resp, err := askDebug(c.Context(), p.Address, creds, v.GetDuration("timeout"))
			if err != nil {
				p.Error = err.Error() + tlsHint(err, tlsCfg != nil)
				return
			}
			p.resp = resp
			if st := resp.GetStatus(); p.Group == endpointGroup && st != nil {
				p.Group, p.Replica = st.GetGroup(), st.GetReplica()
			}
		})
	}
	wg.Wait()
	if err := writeBundle(to, parts, time.Now().UTC()); err != nil {
		return fmt.Errorf("debug bundle: %w", err)
	}
	missing := 0
	for _, p := range parts {
		if p.Error != "" {
			missing++
			fmt.Fprintf(c.ErrOrStderr(), "debug bundle: %s/%s at %s: %s\n", p.Group, p.Replica, p.Address, p.Error)
		}
	}
	fmt.Fprintf(c.OutOrStdout(), "wrote %s: %d of %d replicas\n", to, len(parts)-missing, len(parts))
	switch {
	case missing == len(parts):
		return &exitError{code: 3, err: errors.New("debug bundle: no replica answered")}
	case missing > 0:
		return &exitError{code: 1, err: fmt.Errorf("debug bundle: %d of %d replicas did not answer", missing, len(parts))}
	}
	return nil
}

// endpointGroup names, until it answers, a replica asked by its address
// alone.
const endpointGroup = "endpoint"

// bundleParts lists the replicas to ask: the configuration's, or the
// endpoints (their group and replica named by their answers).
func bundleParts(config, endpoints string) ([]*bundlePart, error) {
	var parts []*bundlePart
	if endpoints != "" {
		if config != "" {
			return nil, errors.New("--config and --endpoints: choose one")
		}
		addrs, err := parseEndpoints(endpoints)
		if err != nil {
			return nil, err
		}
		for i, a := range addrs {
			parts = append(parts, &bundlePart{Group: endpointGroup, Replica: fmt.Sprint(i), Address: a})
		}
		return parts, nil
	}
	cfg, _, err := loadCluster(config)
	if err != nil {
		return nil, err
	}
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			parts = append(parts, &bundlePart{Group: g.Name, Replica: r.ID, Address: r.GRPC})
		}
	}
	return parts, nil
}

// debugResponseMax bounds a replica's answer: its logs (1 MiB), metrics
// and settings, well under it.
const debugResponseMax = 16 << 20

func askDebug(ctx context.Context, addr string, creds credentials.TransportCredentials, timeout time.Duration) (*apipb.DebugResponse, error) {
	cc, err := grpc.NewClient(addr, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return apipb.NewKVClient(cc).Debug(ctx, &apipb.DebugRequest{}, grpc.MaxCallRecvMsgSize(debugResponseMax))
}

// writeBundle writes the archive to file, created here (never replacing a
// file), removed again if writing fails.
func writeBundle(file string, parts []*bundlePart, now time.Time) (err error) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(file)
		}
	}()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	root := "flexkv-debug-" + now.Format("20060102T150405Z")
	add := func(name string, data []byte) error {
		hdr := &tar.Header{Name: path.Join(root, name), Mode: 0o600, Size: int64(len(data)), ModTime: now, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	manifest, err := json.MarshalIndent(map[string]any{"time": now, "replicas": parts}, "", "  ")
	if err != nil {
		return err
	}
	if err := add("manifest.json", append(manifest, '\n')); err != nil {
		return err
	}
	for _, p := range parts {
		if err := addPart(add, p); err != nil {
			return err
		}
	}
	return errors.Join(tw.Close(), gz.Close())
}

// addPart adds the files of one replica's part.
func addPart(add func(string, []byte) error, p *bundlePart) error {
	dir := safeName(p.Group) + "/" + safeName(p.Replica)
	if p.resp == nil {
		return add(dir+"/error.txt", []byte(p.Error+"\n"))
	}
	status, err := protojson.MarshalOptions{Multiline: true, UseProtoNames: true, EmitUnpopulated: true}.Marshal(p.resp.GetStatus())
	if err != nil {
		return err
	}
	return errors.Join(
		add(dir+"/status.json", append(status, '\n')),
		add(dir+"/metrics.txt", []byte(p.resp.GetMetrics())),
		add(dir+"/logs.txt", []byte(p.resp.GetLogs()+fmt.Sprintf("# %d older lines not kept\n", p.resp.GetLogsDropped()))),
		add(dir+"/settings.json", []byte(p.resp.GetSettings()+"\n")),
	)
}

// safeName keeps a name from the configuration or an answer one path
// element of the archive.
func safeName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r < ' ' {
			return '_'
		}
		return r
	}, s)
	if s == "" || s == "." || s == ".." {
		return "_"
	}
	return s
}
