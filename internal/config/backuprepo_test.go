package config

import (
	"slices"
	"strings"
	"testing"
)

func withS3(c *Config) *BackupRepositoryS3 {
	c.System.Backups.Repository.S3 = BackupRepositoryS3{
		Endpoint: "http://127.0.0.1:7070", Bucket: "wharf-backups", Prefix: "node-pool/",
		AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "s3cret-value", PathStyle: true,
	}
	return &c.System.Backups.Repository.S3
}

// Each mistake in system.backups.repository.s3 names its key and says what
// is expected.
func TestRepositoryS3Validation(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(s *BackupRepositoryS3)
		wantKey string
		want    string
	}{
		{"endpoint without bucket", func(s *BackupRepositoryS3) { s.Bucket = "" }, "bucket", "required when endpoint is set"},
		{"bucket too short", func(s *BackupRepositoryS3) { s.Bucket = "ab" }, "bucket", "3 to 63"},
		{"bucket upper case", func(s *BackupRepositoryS3) { s.Bucket = "Backups" }, "bucket", "lower-case"},
		{"bucket with slash", func(s *BackupRepositoryS3) { s.Bucket = "a/b/c" }, "bucket", "lower-case"},
		{"bucket ends with dash", func(s *BackupRepositoryS3) { s.Bucket = "backups-" }, "bucket", "start and end"},
		{"endpoint not a URL", func(s *BackupRepositoryS3) { s.Endpoint = "minio:9000" }, "endpoint", "http or https"},
		{"endpoint without host", func(s *BackupRepositoryS3) { s.Endpoint = "https://" }, "endpoint", "host"},
		{"endpoint with a path", func(s *BackupRepositoryS3) { s.Endpoint = "https://s3.example.com/bucket" }, "endpoint", "base URL"},
		{"endpoint with credentials", func(s *BackupRepositoryS3) { s.Endpoint = "https://a:b@s3.example.com" }, "endpoint", "base URL"},
		{"no secret", func(s *BackupRepositoryS3) { s.SecretAccessKey = "" }, "access_key_id", "both required"},
		{"no access key", func(s *BackupRepositoryS3) { s.AccessKeyID = "" }, "access_key_id", "both required"},
		{"absolute prefix", func(s *BackupRepositoryS3) { s.Prefix = "/wharf" }, "prefix", "relative"},
		{"dot-dot prefix", func(s *BackupRepositoryS3) { s.Prefix = "a/../b" }, "prefix", "relative"},
		{"empty part in prefix", func(s *BackupRepositoryS3) { s.Prefix = "a//b" }, "prefix", "relative"},
		{"too many attempts", func(s *BackupRepositoryS3) { s.MaxAttempts = 100 }, "max_attempts", "0 (default, 5) to 20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(withS3(c))
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil")
			}
			key := "system.backups.repository.s3." + tt.wantKey + ":"
			if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not name %s with %q", err, key, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret-value") {
				t.Fatalf("the error prints the secret: %q", err)
			}
		})
	}
	for _, ok := range []func(s *BackupRepositoryS3){
		func(s *BackupRepositoryS3) {},
		func(s *BackupRepositoryS3) { s.Endpoint = "" },                        // AWS S3
		func(s *BackupRepositoryS3) { s.Prefix = "" },                          // the bucket's root
		func(s *BackupRepositoryS3) { s.Prefix = "a/b" },                       // without the final slash
		func(s *BackupRepositoryS3) { s.Endpoint = "https://s3.example.com/" }, // a final slash
		func(s *BackupRepositoryS3) { *s = BackupRepositoryS3{} },              // no bucket at all
	} {
		c := validConfig()
		ok(withS3(c))
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: Validate() = %v, want nil", c.System.Backups.Repository.S3, err)
		}
	}
}

func TestRepositoryS3Defaults(t *testing.T) {
	var s BackupRepositoryS3
	if s.Enabled() || s.EffectiveRegion() != "us-east-1" {
		t.Fatalf("zero value: enabled %v, region %q", s.Enabled(), s.EffectiveRegion())
	}
	s.Bucket, s.Region = "b-1", "eu-west-3"
	if !s.Enabled() || s.EffectiveRegion() != "eu-west-3" {
		t.Fatalf("enabled %v, region %q", s.Enabled(), s.EffectiveRegion())
	}
	if Defaults().System.Backups.Repository.S3.Enabled() {
		t.Fatal("the default configuration puts the repository in a bucket")
	}
}

// The panel knows nothing of the bucket: an update keeps it, credentials
// included, whatever the body says.
func TestUpdateKeepsRepositoryS3(t *testing.T) {
	var want BackupRepositoryS3
	s, path := newStore(t, func(c *Config) { want = *withS3(c) })
	body := `{"uuid":"u","token_id":"t","token":"x","remote":"https://panel.example.com",
		"system":{"backups":{"repository":{"s3":{"endpoint":"https://evil.example","bucket":"evil","access_key_id":"x","secret_access_key":"y"}}}}}`
	res, err := s.ApplyPanelUpdate(strings.NewReader(body))
	if err != nil || !res.Applied {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	if got := s.Get().System.Backups.Repository.S3; got != want {
		t.Fatalf("s3 = %+v, want the local %+v", got, want)
	}
	if !slices.Contains(res.Kept, "system.backups.repository.s3") {
		t.Fatalf("Kept = %v, want system.backups.repository.s3", res.Kept)
	}
	onDisk, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk.System.Backups.Repository.S3 != want {
		t.Fatalf("on disk s3 = %+v", onDisk.System.Backups.Repository.S3)
	}
	// Omitted from the body: still kept.
	if _, err := s.ApplyPanelUpdate(strings.NewReader(`{"uuid":"u","token_id":"t","token":"x","remote":"https://panel.example.com"}`)); err != nil {
		t.Fatal(err)
	}
	if got := s.Get().System.Backups.Repository.S3; got != want {
		t.Fatalf("after an update without it, s3 = %+v", got)
	}
}

// The keys as an operator writes them in config.yml.
func TestRepositoryS3FromYAML(t *testing.T) {
	data := []byte(`system:
  backups:
    format: repository
    repository:
      s3:
        endpoint: https://minio.example.com:9000
        bucket: wharf-backups
        prefix: pool-1/
        region: eu-central-1
        access_key_id: AKIAEXAMPLE
        secret_access_key: wJalrXUtnFEMI/K7MDENG
        path_style: true
        max_attempts: 7
`)
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	want := BackupRepositoryS3{
		Endpoint: "https://minio.example.com:9000", Bucket: "wharf-backups", Prefix: "pool-1/", Region: "eu-central-1",
		AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG", PathStyle: true, MaxAttempts: 7,
	}
	if got := c.System.Backups.Repository.S3; got != want {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	if keys := UnknownKeys(data); len(keys) != 0 {
		t.Fatalf("UnknownKeys = %v", keys)
	}
}

// Issue 33 items 8 and 9: deduplication is per server and 5 % of the
// repository may stay unused unless the operator says otherwise; bad
// values name their key; the panel cannot change them.
func TestRepositoryDedupScopeAndMaxUnused(t *testing.T) {
	d := Defaults().System.Backups.Repository
	if d.DedupScope != DedupScopeServer || d.NodeWideDedup() || d.MaxUnusedPercent != 5 {
		t.Fatalf("defaults: dedup_scope %q, max_unused_percent %d; want server, 5", d.DedupScope, d.MaxUnusedPercent)
	}
	c, err := Parse([]byte("system:\n  backups:\n    repository:\n      dedup_scope: node\n      max_unused_percent: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.System.Backups.Repository; !r.NodeWideDedup() || r.MaxUnusedPercent != 0 {
		t.Fatalf("parsed: %+v", r)
	}
	for _, tt := range []struct {
		mutate func(r *BackupRepository)
		key    string
	}{
		{func(r *BackupRepository) { r.DedupScope = "cluster" }, "system.backups.repository.dedup_scope: must be one of server, node"},
		{func(r *BackupRepository) { r.MaxUnusedPercent = -1 }, "system.backups.repository.max_unused_percent: must be from 0 to 50"},
		{func(r *BackupRepository) { r.MaxUnusedPercent = 51 }, "system.backups.repository.max_unused_percent: must be from 0 to 50"},
	} {
		c := validConfig()
		tt.mutate(&c.System.Backups.Repository)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Fatalf("Validate() = %v; want %q", err, tt.key)
		}
	}
	cur := validConfig()
	cur.System.Backups.Repository.DedupScope, cur.System.Backups.Repository.MaxUnusedPercent = DedupScopeNode, 20
	next, kept, err := MergePanelUpdate(cur, strings.NewReader(`{"system":{"backups":{"repository":{"dedup_scope":"server","max_unused_percent":1}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := next.System.Backups.Repository; r.DedupScope != DedupScopeNode || r.MaxUnusedPercent != 20 ||
		!slices.Contains(kept, "system.backups.repository.dedup_scope") || !slices.Contains(kept, "system.backups.repository.max_unused_percent") {
		t.Fatalf("after a panel update: %+v, kept %v", r, kept)
	}
}

// Issue 36: sharing a repository between nodes is off unless set, needs a
// repository other nodes reach, and the panel cannot change it.
func TestRepositoryShared(t *testing.T) {
	if Defaults().System.Backups.Repository.Shared {
		t.Fatal("system.backups.repository.shared is on by default")
	}
	c, err := Parse([]byte("system:\n  backups:\n    repository:\n      shared: true\n      path: /srv/wharf-repo\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.System.Backups.Repository.Shared {
		t.Fatal("shared: true not parsed")
	}
	bad := validConfig()
	bad.System.Backups.Repository.Shared = true
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "system.backups.repository.shared: needs a repository other nodes reach") {
		t.Fatalf("Validate() = %v; want the shared key named", err)
	}
	bad.System.Backups.Repository.S3 = BackupRepositoryS3{Bucket: "wharf-backups", AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "secret"}
	if err := bad.Validate(); err != nil {
		t.Fatalf("shared with a bucket: %v", err)
	}
	cur := validConfig()
	cur.System.Backups.Repository.Shared = true
	cur.System.Backups.Repository.Path = "/srv/wharf-repo"
	next, kept, err := MergePanelUpdate(cur, strings.NewReader(`{"system":{"backups":{"repository":{"shared":false}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !next.System.Backups.Repository.Shared || !slices.Contains(kept, "system.backups.repository.shared") {
		t.Fatalf("after a panel update: shared %v, kept %v", next.System.Backups.Repository.Shared, kept)
	}
}
