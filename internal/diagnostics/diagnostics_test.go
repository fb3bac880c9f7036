package diagnostics

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	wruntime "github.com/wharf/wharf/internal/runtime"
)

// TestReportHasNoSecret writes a report for a node whose configuration holds
// every kind of secret, with log lines that (wrongly) contain some of them
// too, and checks that none of them is printed while the rest is there.
func TestReportHasNoSecret(t *testing.T) {
	const (
		tokenID    = "tokIdQx81Zp"
		token      = "nodeTokenS3cretValue-9a8b7c6d5e4f"
		regPass    = "ghp_registryPassw0rdXYZ"
		certPath   = "/etc/letsencrypt/live/node1.example.com/fullchain.pem"
		keyPath    = "/etc/letsencrypt/live/node1.example.com/privkey.pem"
		metricsTok = "scrape-token-0123456789abcdef"
		cfSecret   = "cf-access-secret-77f0e1d2"
		s3KeyID    = "AKIAWHARFEXAMPLE42"
		s3Secret   = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	)
	p := devpanel.New(tokenID, token)
	panelSrv := httptest.NewServer(p.Handler())
	defer panelSrv.Close()

	dir := t.TempDir()
	c := config.Defaults()
	c.UUID = "5f2e0e55-7c5b-4c4e-8d3f-2a9f6f7d3c11"
	c.TokenID, c.Token, c.Remote = tokenID, token, panelSrv.URL
	c.API.SSL = config.SSL{Enabled: true, Cert: certPath, Key: keyPath}
	c.Docker.Registries = map[string]config.RegistryAuth{"ghcr.io": {Username: "bot", Password: regPass}}
	c.Metrics = config.Metrics{BindAddress: "127.0.0.1:9101", Token: metricsTok}
	c.RemoteQuery.CustomHeaders = map[string]string{"CF-Access-Client-Secret": cfSecret}
	c.System.Backups.Format = config.BackupFormatRepository
	c.System.Backups.Repository.S3 = config.BackupRepositoryS3{
		Endpoint: "https://s3.example.com", Bucket: "wharf-pool", Prefix: "repo/", AccessKeyID: s3KeyID, SecretAccessKey: s3Secret,
	}
	c.PlaceUnder(dir)
	for _, d := range []string{c.System.RootDirectory, c.System.Data, c.System.BackupDirectory} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "config.yml")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	err := Write(context.Background(), &out, Options{
		ConfigPath: path, Version: "1.2.3", Commit: "abc1234", LogLines: 2,
		Runtime: describedEngine{info: wruntime.EngineInfo{Version: "28.2.2", StorageDriver: "overlay2", CgroupVersion: "1", CgroupDriver: "cgroupfs"}},
		Logs: func(_ context.Context, n int) ([]string, error) {
			return []string{"level=INFO msg=boot", "level=DEBUG msg=oops token=" + token + " pass=" + regPass + " cf=" + cfSecret + " s3=" + s3Secret}[:n], nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	for _, secret := range []string{tokenID, token, regPass, certPath, keyPath, "privkey", "fullchain", metricsTok, cfSecret, s3KeyID, s3Secret} {
		if strings.Contains(report, secret) {
			t.Fatalf("the report prints %q:\n%s", secret, report)
		}
	}
	for _, want := range []string{
		"1.2.3 (commit abc1234)", "go1.", "kernel:", "storage driver:", "cgroup:",
		"token: " + Redacted, "token_id: " + Redacted, "CF-Access-Client-Secret: " + Redacted, "password: " + Redacted, "username: bot",
		"accepts the node credentials: 200", "data", "free of", "level=INFO msg=boot", "token=" + Redacted,
		"secret_access_key: " + Redacted, "access_key_id: " + Redacted, "s3=" + Redacted,
		"repository: s3://wharf-pool/repo/ (https://s3.example.com)",
	} {
		if !strings.Contains(report, want) {
			t.Fatalf("the report lacks %q:\n%s", want, report)
		}
	}
	calls := p.CallsTo("GET", "/servers")
	if len(calls) == 0 {
		t.Fatal("the panel was not asked")
	}
	if got := calls[0].Header.Get("CF-Access-Client-Secret"); got != cfSecret {
		t.Fatalf("the panel check sent CF-Access-Client-Secret %q, want the configured value", got)
	}
}

func TestReportWithoutConfiguration(t *testing.T) {
	var out bytes.Buffer
	err := Write(context.Background(), &out, Options{
		ConfigPath: filepath.Join(t.TempDir(), "missing.yml"), LogLines: 5,
		Logs: func(context.Context, int) ([]string, error) { return nil, os.ErrNotExist },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cannot read it") || !strings.Contains(out.String(), "not available") {
		t.Fatalf("report:\n%s", out.String())
	}
}

// TestReportHidesEndpointsOnRequest: the Pelican panel offers the report for
// upload to a public paste site; with include_endpoints=false (the
// default of Pelican Wings' route) the node's addresses are left out
// everywhere, the configuration's and those the panel check and the log
// lines repeat. Without the option they are shown.
func TestReportHidesEndpointsOnRequest(t *testing.T) {
	p := devpanel.New("tid", "token-value")
	panelSrv := httptest.NewServer(p.Handler())
	defer panelSrv.Close()
	dir := t.TempDir()
	c := config.Defaults()
	c.TokenID, c.Token, c.Remote = "tid", "token-value", panelSrv.URL
	c.API.Host, c.API.Port = "198.51.100.7", 8443
	c.System.SFTP.BindAddress, c.System.SFTP.BindPort = "203.0.113.9", 2022
	c.System.Backups.Format = config.BackupFormatRepository
	c.System.Backups.Repository.S3 = config.BackupRepositoryS3{Endpoint: "https://objects.example.org:9000", Bucket: "b"}
	c.PlaceUnder(dir)
	path := filepath.Join(dir, "config.yml")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	report := func(hide bool) string {
		var out bytes.Buffer
		err := Write(context.Background(), &out, Options{
			ConfigPath: path, LogLines: 1, HideEndpoints: hide,
			Logs: func(context.Context, int) ([]string, error) {
				return []string{"msg=listening addr=198.51.100.7:8443 panel=" + panelSrv.URL}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	addresses := []string{panelSrv.URL, strings.TrimPrefix(panelSrv.URL, "http://"), "198.51.100.7", "8443", "203.0.113.9", "2022", "objects.example.org"}
	shown := report(false)
	for _, a := range addresses {
		if !strings.Contains(shown, a) {
			t.Fatalf("without hiding, the report lacks %q:\n%s", a, shown)
		}
	}
	hidden := report(true)
	for _, a := range addresses {
		if strings.Contains(hidden, a) {
			t.Fatalf("with include_endpoints=false the report still shows %q (the Pelican panel pastes it in public):\n%s", a, hidden)
		}
	}
	for _, want := range []string{"remote: '" + RedactedEndpoint + "'", "accepts the node credentials", "msg=listening addr=" + RedactedEndpoint} {
		if !strings.Contains(hidden, want) {
			t.Fatalf("the hidden report lacks %q:\n%s", want, hidden)
		}
	}
}

// TestReportSaysWhenNeighboursAreNotIsolated: the report warns when ICC is
// on (after the switch from Wings' default) and when the firewall is off,
// and lists the operator's destinations.
func TestReportSaysWhenNeighboursAreNotIsolated(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(c *config.Config)
		want   []string
	}{
		{"defaults", func(c *config.Config) { c.Docker.Network.BlockedDestinations = []string{"192.0.2.0/24"} },
			[]string{"enable_icc:   false", "169.254.0.0/16", "fd00:ec2::254/128", "[192.0.2.0/24] (docker.network.blocked_destinations)", "rules:"}},
		{"icc on", func(c *config.Config) { c.Docker.Network.EnableICC, c.Docker.Network.ICCDefaultApplied = true, true },
			[]string{"enable_icc:   true  WARNING"}},
		{"wings default", func(c *config.Config) { c.Docker.Network.EnableICC = true },
			[]string{"enable_icc:   false"}},
		{"firewall off", func(c *config.Config) { c.Docker.Network.Firewall = false },
			[]string{"firewall:     OFF  WARNING"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := config.Defaults()
			c.UUID, c.TokenID, c.Token, c.Remote = "u", "t", "secret-token", "http://127.0.0.1:1"
			c.PlaceUnder(dir)
			tc.mutate(c)
			path := filepath.Join(dir, "config.yml")
			if err := c.Save(path); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := Write(context.Background(), &out, Options{ConfigPath: path}); err != nil {
				t.Fatal(err)
			}
			_, section, _ := strings.Cut(out.String(), "== Network isolation ==")
			for _, want := range tc.want {
				if !strings.Contains(section, want) {
					t.Errorf("the network isolation section lacks %q:\n%s", want, section)
				}
			}
		})
	}
}

// The report says how disk limits are held: kernel quotas (unavailable on
// a temporary directory here, and why) and the disk monitor's settings,
// with one line per server directory.
func TestReportSaysHowDiskLimitsAreHeld(t *testing.T) {
	dir := t.TempDir()
	c := config.Defaults()
	c.UUID = "5f2e0e55-7c5b-4c4e-8d3f-2a9f6f7d3c11"
	c.TokenID, c.Token, c.Remote = "id", "tok", "http://127.0.0.1:1"
	c.PlaceUnder(dir)
	c.System.Quotas.Enabled = true
	const server = "0b8f6b7e-9f59-4bd2-8a43-5d0b1fe7c6a1"
	for _, d := range []string{filepath.Join(c.System.Data, server), filepath.Join(c.System.Data, "not-a-server")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "config.yml")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Write(context.Background(), &out, Options{ConfigPath: path}); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	for _, want := range []string{
		"== Disk limit enforcement ==",
		"kernel project quotas: unavailable (project quotas are not available",
		"disk monitor: every 5 s (system.disk_check_interval), full walk at least every 150 s (system.disk_walk_interval), entry limit 500000",
		"server " + server + ": Wharf's disk monitor",
	} {
		if !strings.Contains(report, want) {
			t.Fatalf("the report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "server not-a-server") {
		t.Fatal("a directory that is not a server's is listed")
	}
}

// describedEngine is a runtime that only describes its engine (the other
// methods are never called by the report).
type describedEngine struct {
	wruntime.Runtime
	info wruntime.EngineInfo
}

func (e describedEngine) EngineInfo(context.Context) (wruntime.EngineInfo, error) { return e.info, nil }

// TestReportAsksTheNodesRuntime: the engine section comes from the runtime
// handed to the report (the daemon's own), not from a Docker client of its
// own; without one, or one that cannot describe its engine, it says so.
func TestReportAsksTheNodesRuntime(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"runtime", Options{Runtime: describedEngine{info: wruntime.EngineInfo{Version: "99.1.2", APIVersion: "1.99", Containers: 7, Running: 3}}},
			"engine:         99.1.2 (API 1.99)"},
		{"none", Options{}, "(no container runtime)"},
		{"down", Options{RuntimeError: errors.New("dial unix /run/docker.sock: refused")}, "(the engine does not answer: dial unix"},
		{"cannot describe", Options{Runtime: struct{ wruntime.Runtime }{}}, "does not describe its engine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.ConfigPath = filepath.Join(t.TempDir(), "absent.yml")
			var out bytes.Buffer
			if err := Write(context.Background(), &out, tc.opts); err != nil {
				t.Fatal(err)
			}
			_, section, _ := strings.Cut(out.String(), "== Container engine ==")
			section, _, _ = strings.Cut(section, "==")
			if !strings.Contains(section, tc.want) {
				t.Errorf("the engine section lacks %q:\n%s", tc.want, section)
			}
		})
	}
}
