package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/flexkv/flexkv/configs"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// The embedded default configuration, used when no --config is given.
const defaultConfigName = "configs/local.yaml"

// settings binds a command's flags to viper: a flag given on the command
// line wins, then the environment variable FLEXKV_<FLAG> (dashes as
// underscores: --data-dir is FLEXKV_DATA_DIR), then the flag's default.
func settings(cmd *cobra.Command) *viper.Viper {
	v := viper.New()
	v.SetEnvPrefix("FLEXKV")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	cmd.Flags().VisitAll(func(f *pflag.Flag) { _ = v.BindPFlag(f.Name, f) })
	return v
}

// readSettingsFile reads the --settings file, if any, into v, below flags
// and environment (viper's precedence). Its keys must be names of the
// command's flags: a misspelt key is an error, not a silent default.
func readSettingsFile(cmd *cobra.Command, v *viper.Viper) error {
	path := v.GetString("settings")
	if path == "" {
		return nil
	}
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("settings %s: %w", path, err)
	}
	f := viper.New()
	f.SetConfigFile(path)
	f.SetConfigType("yaml")
	if err := f.ReadInConfig(); err != nil {
		return fmt.Errorf("settings %s: %w", path, err)
	}
	for _, k := range f.AllKeys() {
		if k == "settings" || cmd.Flags().Lookup(k) == nil {
			return fmt.Errorf("settings %s: unknown setting %q", path, k)
		}
	}
	return nil
}

// loadCluster reads a cluster configuration (DESIGN 8) strictly: an unknown
// or misspelt field is an error, and so is a configuration that does not
// validate. An empty path reads the embedded configs/local.yaml. It returns
// the latency matrix too when the configuration names one.
func loadCluster(path string) (*partition.ClusterConfig, *partition.Latency, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	dir := "configs"
	name := defaultConfigName
	if path == "" {
		if err := v.ReadConfig(bytes.NewReader(configs.LocalYAML())); err != nil {
			return nil, nil, fmt.Errorf("config %s: %w", name, err)
		}
	} else {
		name, dir = path, filepath.Dir(path)
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return nil, nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	var cfg partition.ClusterConfig
	if err := v.UnmarshalExact(&cfg); err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", name, err)
	}
	if err := protocol.Validate(&cfg); err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", name, err)
	}
	var lat *partition.Latency
	if cfg.Latency != "" {
		var err error
		if path == "" {
			// The embedded configurations name the embedded matrix.
			lat, err = configs.AWS12Latency()
		} else {
			lat, err = cfg.LoadLatency(dir)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("config %s: %w", name, err)
		}
	}
	return &cfg, lat, nil
}
