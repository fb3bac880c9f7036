package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNetworkIsolationDefaults: neighbours isolated, Wharf's firewall on,
// no operator destinations.
func TestNetworkIsolationDefaults(t *testing.T) {
	c, err := Parse([]byte("uuid: u\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := c.Docker.Network
	if n.EnableICC || !n.Firewall || len(n.BlockedDestinations) != 0 || n.ICCDefaultApplied {
		t.Errorf("defaults: enable_icc %v, firewall %v, blocked_destinations %v, icc_default_applied %v; want false, true, none, false",
			n.EnableICC, n.Firewall, n.BlockedDestinations, n.ICCDefaultApplied)
	}
}

func TestBlockedDestinationsValidation(t *testing.T) {
	good := []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "2001:db8::1", " 198.51.100.0/24 "}
	c := validConfig()
	c.Docker.Network.BlockedDestinations = good
	if err := c.Validate(); err != nil {
		t.Fatalf("valid destinations refused: %v", err)
	}
	for _, tc := range []struct{ value, want string }{
		{"not-an-address", "not a CIDR"},
		{"10.0.0.1/8", "did you mean 10.0.0.0/8"},
		{"0.0.0.0/0", "blocks every address"},
		{"::/0", "blocks every address"},
		{"::ffff:10.0.0.1", "IPv4-mapped"},
		{"fe80::1%eth0", "not a CIDR"},
		{"172.18.5.0/24", "container subnet"},
		{"fdba:17c8:6c94::/48", "container subnet"},
		{"10.0.0.0/33", "not a CIDR"},
	} {
		c := validConfig()
		c.Docker.Network.BlockedDestinations = []string{"192.0.2.0/24", tc.value}
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "docker.network.blocked_destinations:") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: Validate() = %v, want an error on docker.network.blocked_destinations saying %q", tc.value, err, tc.want)
		}
	}
}

// TestICCDefaultAppliedOnceToATakenOverFile: a Wings file carries
// enable_icc: true (Wings writes its default): Wharf turns it off once
// and marks the file; the operator's true after that is kept.
func TestICCDefaultAppliedOnceToATakenOverFile(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "wings-config.yml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Docker.Network.EnableICC {
		t.Fatal("the Wings file does not carry enable_icc: true")
	}
	if !c.ApplyICCDefault() {
		t.Fatal("ApplyICCDefault did not report turning ICC off")
	}
	if c.Docker.Network.EnableICC || !c.Docker.Network.ICCDefaultApplied {
		t.Fatalf("after the takeover: enable_icc %v, icc_default_applied %v", c.Docker.Network.EnableICC, c.Docker.Network.ICCDefaultApplied)
	}
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}

	// The operator turns it on again after the switch: kept from then on.
	saved, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	saved.Docker.Network.EnableICC = true
	if err := saved.Save(path); err != nil {
		t.Fatal(err)
	}
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if again.ApplyICCDefault() || !again.Docker.Network.EnableICC {
		t.Fatalf("the operator's enable_icc: true after the switch was reset")
	}

	// A fresh configuration: nothing to turn off, the mark is set.
	fresh := validConfig()
	if fresh.ApplyICCDefault() || fresh.Docker.Network.EnableICC || !fresh.Docker.Network.ICCDefaultApplied {
		t.Fatal("a fresh configuration was changed by ApplyICCDefault beyond its mark")
	}
}
