package firewall

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"
)

// testNamespace creates a network namespace of the test's own (ip netns)
// and returns a descriptor of it; the namespace is removed at cleanup.
// Skipped without root or nftables.
func testNamespace(t *testing.T) (fd int, name string) { return benchNamespace(t) }

func benchNamespace(t testing.TB) (fd int, name string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace and nftables)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name = "wharf-fw-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd()), name
}

// nftList is the namespace's ruleset as nft prints it, for the log of a
// failing test (never parsed).
func nftList(name string) string {
	out, err := exec.Command("ip", "netns", "exec", name, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		return "(nft: " + err.Error() + ")"
	}
	return string(out)
}

// TestInstallVerifyEnsureInTheKernel installs the rules in a namespace of
// the test's own, and checks that they verify, that an install again
// changes nothing, that a deleted table or a flushed ruleset is noticed
// and reinstalled by Ensure, and that rules of other settings do not pass
// for the wanted ones.
func TestInstallVerifyEnsureInTheKernel(t *testing.T) {
	fd, ns := testNamespace(t)
	f := New(Options{NetNS: fd, Blocked: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")}})
	for _, b := range []Bridge{{Name: "service0", IPv4Subnet: netip.MustParsePrefix("172.18.0.0/16")}, {Name: "br-0123456789ab"}} {
		if _, err := f.AddBridge(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Verify(); err == nil {
		t.Fatal("Verify passes before anything is installed")
	}
	if err := f.Install(); err != nil {
		t.Fatalf("Install: %v", err)
	}
	if err := f.Verify(); err != nil {
		t.Fatalf("Verify after Install: %v\n%s", err, nftList(ns))
	}
	if err := f.Install(); err != nil {
		t.Fatalf("Install again: %v", err)
	}
	if err := f.Verify(); err != nil {
		t.Fatalf("Verify after a second Install: %v\n%s", err, nftList(ns))
	}
	listed := nftList(ns)
	for _, want := range []string{"table bridge wharf_service0", "table inet wharf_service0", "table inet wharf_br-0123456789ab", "10.99.0.0/16", "169.254.0.0/16", "fd00:ec2::254", "arp saddr ip 172.18.0.0/16", `iifname "service0" oifname "service0"`} {
		if !strings.Contains(listed, want) {
			t.Errorf("nft list ruleset has no %q:\n%s", want, listed)
		}
	}

	// Deleted behind the firewall's back: noticed, then reinstalled.
	c, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		t.Fatal(err)
	}
	c.DelTable(&nftables.Table{Name: TableName("service0"), Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Verify(); err == nil || !strings.Contains(err.Error(), "inet wharf_service0") {
		t.Fatalf("Verify after deleting a table = %v, want it to name the table", err)
	}
	if err := f.Ensure(); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if err := f.Verify(); err != nil {
		t.Fatalf("Verify after Ensure: %v", err)
	}
	c.FlushRuleset()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Ensure(); err != nil {
		t.Fatalf("Ensure after a flushed ruleset: %v", err)
	}
	if err := f.Verify(); err != nil {
		t.Fatalf("Verify after Ensure: %v", err)
	}

	// Another node's settings (ICC on) installed over them: not accepted
	// as the wanted rules.
	other := New(Options{NetNS: fd, AllowICC: true})
	if _, err := other.AddBridge(Bridge{Name: "service0", IPv4Subnet: netip.MustParsePrefix("172.18.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	if err := other.Install(); err != nil {
		t.Fatal(err)
	}
	if err := f.Verify(); err == nil {
		t.Fatal("rules of other settings pass the verification")
	}
	if err := f.Ensure(); err != nil {
		t.Fatal(err)
	}

	if err := f.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if listed := nftList(ns); strings.Contains(listed, "wharf_") {
		t.Errorf("tables left after Remove:\n%s", listed)
	}
	if err := f.Remove(); err != nil {
		t.Errorf("Remove of absent tables: %v", err)
	}
}
