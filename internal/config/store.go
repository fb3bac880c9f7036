package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"go.yaml.in/yaml/v3"

	"github.com/wharf/wharf/internal/atomicfile"
)

// ErrNotFound is returned by Load when the file does not exist.
var ErrNotFound = errors.New("config: configuration file not found")

// Load reads the YAML file at path onto the defaults and validates the result.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", ErrNotFound, path)
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Parse decodes YAML onto the defaults without validating.
func Parse(data []byte) (*Config, error) {
	c := Defaults()
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	if err := yaml.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("config: invalid YAML: %w", err)
	}
	return c, nil
}

// Marshal renders the configuration as YAML.
func (c *Config) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return buf.Bytes(), nil
}

// Save writes the configuration to path atomically with mode 0600 (it holds
// the token). Keys of the file already at path that the configuration does
// not know (another agent's settings) are kept.
func (c *Config) Save(path string) error {
	data, err := c.Marshal()
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(path); err == nil {
		data = keepUnknown(data, old)
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// Clone returns a deep copy.
func (c *Config) Clone() *Config {
	data, err := json.Marshal(c)
	if err != nil {
		panic("config: clone: " + err.Error()) // every field is JSON-safe
	}
	out := &Config{}
	if err := json.Unmarshal(data, out); err != nil {
		panic("config: clone: " + err.Error())
	}
	return out
}

// Store is the live configuration: one accessor for every part of the daemon
// that reads values which POST /api/update may change.
type Store struct {
	path string
	mu   sync.Mutex // serialises writers
	cur  atomic.Pointer[Config]
}

// NewStore wraps an already loaded and validated configuration saved at path.
func NewStore(path string, c *Config) *Store {
	s := &Store{path: path}
	s.cur.Store(c)
	return s
}

// Get returns the current configuration. Treat it as read-only.
func (s *Store) Get() *Config { return s.cur.Load() }

// Update applies fn to a copy of the current configuration, validates it,
// saves it and only then makes it current. On any error nothing changes.
func (s *Store) Update(fn func(c *Config)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.cur.Load().Clone()
	fn(next)
	return s.commit(next)
}

func (s *Store) commit(next *Config) error {
	if err := next.Validate(); err != nil {
		return err
	}
	if err := next.Save(s.path); err != nil {
		return &SaveError{Err: err}
	}
	s.cur.Store(next)
	return nil
}

// SaveError means the configuration could not be written; nothing changed.
type SaveError struct{ Err error }

func (e *SaveError) Error() string { return "config: saving failed: " + e.Err.Error() }
func (e *SaveError) Unwrap() error { return e.Err }

// DecodeError means the update body is not valid JSON for the configuration.
type DecodeError struct{ Err error }

func (e *DecodeError) Error() string { return "config: invalid configuration body: " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// UpdateResult says what a panel update did.
type UpdateResult struct {
	Applied bool
	// Kept lists keys whose local values were kept whatever the body said.
	Kept []string
	// NeedsRestart lists changed keys that take effect after a restart.
	NeedsRestart []string
}

// ApplyPanelUpdate implements POST /api/update: the new configuration is the
// defaults overlaid with body, except for the keys that give access to the
// host, which keep their local values. It is validated completely, written,
// and only then applied. With ignore_panel_config_updates nothing happens.
func (s *Store) ApplyPanelUpdate(body io.Reader) (UpdateResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur.Load()
	if cur.IgnorePanelConfigUpdates {
		return UpdateResult{Applied: false}, nil
	}
	next, kept, err := MergePanelUpdate(cur, body)
	if err != nil {
		return UpdateResult{}, userError(err)
	}
	if err := s.commit(next); err != nil {
		return UpdateResult{}, userError(err)
	}
	return UpdateResult{Applied: true, Kept: kept, NeedsRestart: restartKeys(cur, next)}, nil
}

// acmeLivePrefix is where certificate clients keep live certificates; the
// panel cannot point the node at other files there.
const acmeLivePrefix = "/etc/letsencrypt/live/"

// MergePanelUpdate computes the configuration a panel update would produce
// from current and the JSON body, and lists the host-access keys it kept.
func MergePanelUpdate(current *Config, body io.Reader) (*Config, []string, error) {
	next := Defaults()
	dec := json.NewDecoder(body)
	if err := dec.Decode(next); err != nil {
		return nil, nil, &DecodeError{Err: err}
	}
	if dec.More() {
		return nil, nil, &DecodeError{Err: errors.New("unexpected data after the JSON object")}
	}

	var kept []string
	str := func(key string, dst *string, local string) {
		if *dst != local {
			kept = append(kept, key)
		}
		*dst = local
	}
	list := func(key string, dst *[]string, local []string) {
		if !equalStrings(*dst, local) {
			kept = append(kept, key)
		}
		*dst = append([]string(nil), local...)
	}
	cs, ns := &current.System, &next.System
	str("system.root_directory", &ns.RootDirectory, cs.RootDirectory)
	str("system.log_directory", &ns.LogDirectory, cs.LogDirectory)
	str("system.data", &ns.Data, cs.Data)
	str("system.archive_directory", &ns.ArchiveDirectory, cs.ArchiveDirectory)
	str("system.backup_directory", &ns.BackupDirectory, cs.BackupDirectory)
	str("system.tmp_directory", &ns.TmpDirectory, cs.TmpDirectory)
	str("system.username", &ns.Username, cs.Username)
	str("remote", &next.Remote, current.Remote)
	list("allowed_mounts", &next.AllowedMounts, current.AllowedMounts)
	list("system.backups.restore_host_allowlist", &ns.Backups.RestoreHostAllowlist, cs.Backups.RestoreHostAllowlist)
	// Where the node's archives are: the panels know nothing of it.
	str("system.backups.layout", &ns.Backups.Layout, cs.Backups.Layout)
	str("system.backups.format", &ns.Backups.Format, cs.Backups.Format)
	str("system.backups.repository.path", &ns.Backups.Repository.Path, cs.Backups.Repository.Path)
	// What the repository shares and keeps: the node's business (issue 33).
	str("system.backups.repository.dedup_scope", &ns.Backups.Repository.DedupScope, cs.Backups.Repository.DedupScope)
	keepValue(&kept, "system.backups.repository.max_unused_percent", &ns.Backups.Repository.MaxUnusedPercent, cs.Backups.Repository.MaxUnusedPercent)
	keepValue(&kept, "system.backups.repository.shared", &ns.Backups.Repository.Shared, cs.Backups.Repository.Shared)
	// The bucket and its credentials: the panels never send them.
	keepValue(&kept, "system.backups.repository.s3", &ns.Backups.Repository.S3, cs.Backups.Repository.S3)
	if !jsonEqual(next.Docker, current.Docker) {
		kept = append(kept, "docker")
	}
	next.Docker = current.Clone().Docker
	keepValue(&kept, "ignore_panel_config_updates", &next.IgnorePanelConfigUpdates, current.IgnorePanelConfigUpdates)
	keepValue(&kept, "api.remote_download.allow_loopback", &next.API.RemoteDownload.AllowLoopback, current.API.RemoteDownload.AllowLoopback)
	// A protection the panels do not know: an update must not turn it off.
	keepValue(&kept, "api.require_token_scope", &next.API.RequireTokenScope, current.API.RequireTokenScope)
	// A listener and its credential: the node's own business.
	keepValue(&kept, "metrics", &next.Metrics, current.Metrics)
	// Test knobs belong to the test that wrote the file.
	next.Testing = current.Testing
	// The access proxy's credentials in front of the panel: the panels
	// never send them, and losing them would cut the node off the panel.
	if !jsonEqual(next.RemoteQuery.CustomHeaders, current.RemoteQuery.CustomHeaders) {
		kept = append(kept, "remote_query.custom_headers")
	}
	next.RemoteQuery.CustomHeaders = current.Clone().RemoteQuery.CustomHeaders
	str("system.log_format", &ns.LogFormat, cs.LogFormat)
	// A limit that protects the host, which the panel knows nothing of.
	keepValue(&kept, "system.decompress", &ns.Decompress, cs.Decompress)
	// The same for the bounds of backup downloads.
	keepValue(&kept, "system.backups.downloads", &ns.Backups.Downloads, cs.Backups.Downloads)
	// The backups folder (issue 35): the panels know nothing of it.
	keepValue(&kept, "system.backups.browse", &ns.Backups.Browse, cs.Backups.Browse)
	str("system.backups.browse_directory", &ns.Backups.BrowseDirectory, cs.Backups.BrowseDirectory)
	// Derived at boot (the owner of server files): never the panel's to choose.
	ns.User = cs.User
	// Where the daemon writes host files (machine-id, passwd under User):
	// the node's business, as User is.
	ns.MachineID = cs.MachineID
	if ns.Timezone == "" {
		ns.Timezone = cs.Timezone // auto-detected at boot and persisted
	}

	if strings.HasPrefix(next.API.SSL.Cert, acmeLivePrefix) || strings.HasPrefix(next.API.SSL.Key, acmeLivePrefix) {
		if next.API.SSL.Cert != current.API.SSL.Cert || next.API.SSL.Key != current.API.SSL.Key {
			kept = append(kept, "api.ssl.cert", "api.ssl.key")
		}
		next.API.SSL.Cert = current.API.SSL.Cert
		next.API.SSL.Key = current.API.SSL.Key
	}
	return next, kept, nil
}

// keepValue sets *dst to the local value, and lists key when the update
// asked for another.
func keepValue[T comparable](kept *[]string, key string, dst *T, local T) {
	if *dst != local {
		*kept = append(*kept, key)
	}
	*dst = local
}

func restartKeys(old, next *Config) []string {
	var keys []string
	if old.API.Host != next.API.Host {
		keys = append(keys, "api.host")
	}
	if old.API.Port != next.API.Port {
		keys = append(keys, "api.port")
	}
	if old.API.SSL != next.API.SSL {
		keys = append(keys, "api.ssl")
	}
	if old.System.SFTP != next.System.SFTP {
		keys = append(keys, "system.sftp")
	}
	return keys
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
