// Package packaging holds the systemd unit and the container image
// definition; its tests check that both are usable.
package packaging

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit, with
// ExecStart pointed at an existing binary (the real one is installed later).
func TestSystemdUnitVerifies(t *testing.T) {
	verifyUnit(t, "wharf.service", "Requires=docker.service", "After=docker.service")
}

// TestPodmanUnitVerifies checks the unit of a Podman host (issue 37): it
// wants podman.socket and needs no docker.service.
func TestPodmanUnitVerifies(t *testing.T) {
	text := verifyUnit(t, "wharf-podman.service", "Wants=podman.socket", "After=podman.socket")
	if strings.Contains(text, "docker.service") {
		t.Fatal("the Podman unit names docker.service")
	}
}

func verifyUnit(t *testing.T, file string, wants ...string) string {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd)")
	}
	unit, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(unit)
	for _, want := range append(wants, "Restart=on-failure", "LimitNOFILE=1048576", "PrivateTmp=false") {
		if !strings.Contains(text, want) {
			t.Fatalf("%s lacks %s", file, want)
		}
	}
	orig := text
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	text = strings.Replace(text, "ExecStart=/usr/local/bin/wharf", "ExecStart="+self, 1)
	path := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", file, err, out)
	}
	return orig
}

// TestImageBuildsAndRuns builds the image from a static binary and runs
// `wharf version` in it.
func TestImageBuildsAndRuns(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Fatal("the docker CLI is needed by this test")
	}
	ctxDir := t.TempDir()
	bin := filepath.Join(ctxDir, "dist", "wharf")
	// Static, as make release builds it, but without -trimpath: built this
	// way it shares its compiled packages with the e2e tests' binary in the
	// build cache (a -trimpath build compiles every package again).
	build := exec.Command("go", "build", "-ldflags", "-s -w -X main.version=image-test -X main.commit=feedface", "-o", bin, "github.com/wharf/wharf/cmd/wharf")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.Command("cp", "-r", "../packaging", filepath.Join(ctxDir, "packaging")).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	tag := "wharf-packaging-test:" + hex.EncodeToString(b)
	out, err := exec.Command(docker, "build", "-q", "-f", filepath.Join(ctxDir, "packaging", "Dockerfile"), "--build-arg", "BINARY=dist/wharf", "-t", tag, ctxDir).CombinedOutput()
	if err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(docker, "rmi", "-f", tag).Run() })
	out, err = exec.Command(docker, "run", "--rm", tag, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "wharf image-test (commit feedface") {
		t.Fatalf("docker run version: %v\n%s", err, out)
	}
}
