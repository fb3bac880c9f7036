package runtime

import "testing"

func TestRegistryAuthFor(t *testing.T) {
	regs := map[string]RegistryAuth{
		"ghcr.io":                 {Username: "ghcr"},
		"ghcr.io/org":             {Username: "ghcr-org"},
		"ghcr.io/org/team":        {Username: "ghcr-org-team"},
		"registry.example.com":    {Username: "example"},
		"localhost:5000":          {Username: "local5000"},
		"docker.io/library":       {Username: "hub-library"},
		"index.docker.io/someone": {Username: "hub-someone"},
		"https://quay.io/":        {Username: "quay"},
	}
	tests := []struct {
		image string
		want  string // "" = nil
	}{
		{"ghcr.io/pterodactyl/yolks:java_17", "ghcr"},
		{"ghcr.io/org/app:1", "ghcr-org"},
		{"ghcr.io/org/team/app@sha256:abc", "ghcr-org-team"},
		{"ghcr.io/org/teamx/app", "ghcr-org"},
		{"ghcr.io/orgx/app", "ghcr"},
		{"GHCR.IO/x/y", "ghcr"},
		{"ghcr.io.evil.tld/x", ""},
		{"ghcr.iox/y", ""},
		{"evil.tld/ghcr.io/x", ""},
		{"ghcr.io:443/x", ""},
		{"registry.example.com/a/b:tag", "example"},
		{"registry.example.com.evil.tld/x", ""},
		{"registry.example.comevil/x", ""},
		{"localhost:5000/img", "local5000"},
		{"localhost/img", ""},
		{"localhost:5001/img", ""},
		{"ubuntu", "hub-library"},
		{"ubuntu:22.04", "hub-library"},
		{"library/ubuntu", "hub-library"},
		{"docker.io/library/ubuntu", "hub-library"},
		{"someone/app", "hub-someone"},
		{"docker.io/someone/app:1", "hub-someone"},
		{"other/app", ""},
		{"quay.io/x/y", "quay"},
		{"~ghcr.io/x", ""},
		{"", ""},
		{"ghcr.io/", ""},
	}
	for _, tt := range tests {
		got := RegistryAuthFor(tt.image, regs)
		switch {
		case tt.want == "" && got != nil:
			t.Errorf("RegistryAuthFor(%q) = %q, want nil", tt.image, got.Username)
		case tt.want != "" && got == nil:
			t.Errorf("RegistryAuthFor(%q) = nil, want %q", tt.image, tt.want)
		case tt.want != "" && got.Username != tt.want:
			t.Errorf("RegistryAuthFor(%q) = %q, want %q", tt.image, got.Username, tt.want)
		}
	}
}

func TestRegistryAuthForReturnsCopy(t *testing.T) {
	regs := map[string]RegistryAuth{"ghcr.io": {Username: "u", Password: "p"}}
	got := RegistryAuthFor("ghcr.io/x", regs)
	got.Password = "changed"
	if regs["ghcr.io"].Password != "p" {
		t.Fatal("RegistryAuthFor returned a pointer into the caller's map")
	}
	if RegistryAuthFor("ghcr.io/x", nil) != nil {
		t.Fatal("nil registries must give nil")
	}
}
