package docker

import (
	"context"
	"testing"

	"github.com/moby/moby/client"
	"github.com/moby/moby/client/pkg/versions"
)

// The client speaks the engine's API version when the engine is older than
// the client (Engine 20.10 speaks 1.41; the client's default is newer).
func TestNegotiatesEngineAPIVersion(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	sv, err := rawClient(t).ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := sv.APIVersion
	if versions.GreaterThan(want, client.MaxAPIVersion) {
		want = client.MaxAPIVersion
	}
	if got := r.APIVersion(); got != want {
		t.Errorf("APIVersion = %s, want %s (engine %s speaks %s)", got, want, sv.Version, sv.APIVersion)
	}
	info, err := r.EngineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.APIVersion != want || info.Version != sv.Version {
		t.Errorf("EngineInfo = %+v, want API %s engine %s", info, want, sv.Version)
	}
}
