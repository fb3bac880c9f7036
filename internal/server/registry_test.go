package server

import (
	"testing"

	"github.com/wharf/wharf/internal/config"
)

// The server's image and the installer's both take their credentials from the live
// docker.registries, matched by runtime.RegistryAuthFor.
func TestRegistryAuthFromConfig(t *testing.T) {
	c := config.Defaults()
	c.Docker.Registries = map[string]config.RegistryAuth{
		"ghcr.io/org": {Username: "org-user", Password: "org-pass"},
		"ghcr.io":     {Username: "any-user", Password: "any-pass"},
	}
	s := &Server{deps: &Deps{Config: config.NewStore("", c)}}
	for image, want := range map[string]string{
		"ghcr.io/org/game:latest":      "org-user",
		"ghcr.io/other/game":           "any-user",
		"ghcr.io.evil.tld/org/game":    "",
		"docker.io/library/alpine:3.2": "",
		"~wharf-test/gameserver":       "",
	} {
		got := s.registryAuth(image)
		switch {
		case want == "" && got != nil:
			t.Errorf("%s: credentials of %q given", image, got.Username)
		case want != "" && (got == nil || got.Username != want):
			t.Errorf("%s: got %v, want %s", image, got, want)
		}
	}
}
