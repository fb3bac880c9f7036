package transfer

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/wait"
)

// probeVerdicts streams to conn as fast as it can for about two seconds
// and returns how many of the probe's verdicts (one per interval, after the
// first) said "the link holds it back".
func probeVerdicts(t *testing.T, conn *net.TCPConn) (link, total int) {
	t.Helper()
	p := &linkProbe{}
	p.conn.Store(conn)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		data := make([]byte, 1<<20)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := conn.Write(data); err != nil {
				return
			}
		}
	}()
	p.limitedByLink() // the first sample
	for range 8 {
		time.Sleep(linkProbeEvery + 20*time.Millisecond) // one probe interval per sample: the probe is time-based
		if p.limitedByLink() {
			link++
		}
		total++
	}
	close(stop)
	_ = conn.Close()
	<-done
	return link, total
}

func TestLinkProbeSaysReceiverWhenTheReaderIsSlow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<20)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			time.Sleep(time.Duration(n) * 10 * time.Nanosecond) // a slow reader, about 100 MB/s: the delay is the point
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	link, total := probeVerdicts(t, c.(*net.TCPConn))
	if link > total/4 {
		t.Fatalf("a slow reader on loopback was taken for a slow link in %d of %d intervals", link, total)
	}
}

// TestLinkProbeSaysLinkWhenTheNetworkIsSlow sends through a veth pair
// shaped to 400 Mbit/s (tc tbf) to a fast reader in another network
// namespace. It needs root and iproute2 (.ci/run installs it).
func TestLinkProbeSaysLinkWhenTheNetworkIsSlow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("iproute2 is needed (apt-get install iproute2): ", err)
	}
	ns := fmt.Sprintf("wharf-lp-%d", os.Getpid())
	host, peer := fmt.Sprintf("wlp%da", os.Getpid()%100000), fmt.Sprintf("wlp%db", os.Getpid()%100000)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
	run("ip", "link", "set", peer, "netns", ns)
	run("ip", "addr", "add", "10.231.7.1/24", "dev", host)
	run("ip", "link", "set", host, "up")
	run("ip", "netns", "exec", ns, "ip", "addr", "add", "10.231.7.2/24", "dev", peer)
	run("ip", "netns", "exec", ns, "ip", "link", "set", peer, "up")
	run("tc", "qdisc", "add", "dev", host, "root", "tbf", "rate", "400mbit", "burst", "256kb", "latency", "20ms")

	const addr = "10.231.7.2:7391"
	recv := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestLinkProbeReceiverProcess$")
	recv.Env = append(os.Environ(), "WHARF_LINKPROBE_LISTEN="+addr)
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = recv.Process.Kill(); _ = recv.Wait() })
	var c net.Conn
	wait.ForNoError(t, 10*time.Second, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, time.Second)
		return err
	}, "the receiver in the namespace to listen")
	link, total := probeVerdicts(t, c.(*net.TCPConn))
	if link < total*3/4 {
		t.Fatalf("a 400 Mbit/s link to a fast reader was taken for the link in only %d of %d intervals", link, total)
	}
}

// TestLinkProbeReceiverProcess is the fast reader of the test above, run
// in its network namespace; on its own it does nothing.
func TestLinkProbeReceiverProcess(t *testing.T) {
	addr := os.Getenv("WHARF_LINKPROBE_LISTEN")
	if addr == "" {
		t.Skip("helper process of TestLinkProbeSaysLinkWhenTheNetworkIsSlow")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, c)
}
