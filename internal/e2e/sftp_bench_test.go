package e2e

import (
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/bench"
	"github.com/wharf/wharf/internal/testutil/tree"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// The SFTP benchmarks drive OpenSSH's sftp client (the same binary, the
// same options, the cipher the two sides negotiate) against the daemon and,
// side by side, against OpenSSH's own sftp-server behind a local sshd on
// another loopback port: both sides then pay for SSH encryption, which
// `sftp -D sftp-server` would skip. Sources and destinations are on the
// same disk. WHARF_BENCH_FILE_MB (default 1024) and WHARF_BENCH_TREE_MB
// (default 1024) change the sizes; WHARF_BENCH_SFTP_CIPHER pins a cipher
// (-c) for both.

const sftpBenchServer = "5f7b0000-0000-4000-8000-0000000000f1"

type sftpBench struct {
	n        *node
	key      string // the client's private key file
	refPort  int
	refRoot  string // the reference's destination, next to the server's directory
	local    string // the client's side
	srvDir   string
	maxRSS   int64
	startRSS int64
	cpu      time.Duration // the daemon's CPU over our runs
	runs     int
}

func newSFTPBench(b *testing.B) *sftpBench {
	b.Helper()
	if _, err := os.Stat("/usr/lib/openssh/sftp-server"); err != nil {
		b.Fatal("OpenSSH's sftp-server is needed (Debian openssh-server)")
	}
	signer, priv := newSSHKey(b)
	// A disk limit (1 TiB, far above what the runs write) so that every
	// write pays for the whole disk accounting, limit check included.
	n := startSFTPNode(b, nil, sftpServerDef(sftpBenchServer, 1<<20, nil))
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "bench", Keys: []string{authorizedKey(signer)}, Server: sftpBenchServer, User: sftpOwner, Permissions: []string{"*"}})
	s := &sftpBench{n: n, srvDir: n.serverDir(sftpBenchServer)}
	base := filepath.Dir(n.Config.System.Data)
	s.refRoot = filepath.Join(base, "reference")
	s.local = filepath.Join(base, "client")
	for _, d := range []string{s.refRoot, s.local, s.srvDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		b.Fatal(err)
	}
	s.key = filepath.Join(base, "id_ed25519")
	os.WriteFile(s.key, pem.EncodeToMemory(blk), 0o600)
	s.refPort = startReferenceSSHD(b, base, authorizedKey(signer))
	n.sftpOpen(b, sftpLogin("bench", sftpBenchServer), ssh.PublicKeys(signer)).close()
	s.startRSS = procRSS(b, n.cmd.Process.Pid)
	return s
}

// startReferenceSSHD runs OpenSSH's sshd on a free loopback port, serving
// sftp-server to root with the benchmark's key. sshd starts the subsystem
// through the user's shell, which reads ~/.bashrc: HOME points to an empty
// directory so that a developer's shell setup (pyenv init took 4 s here)
// is not timed as part of the reference.
func startReferenceSSHD(b *testing.B, base, authorized string) int {
	b.Helper()
	dir := filepath.Join(base, "sshd")
	os.MkdirAll(dir, 0o700)
	os.MkdirAll("/run/sshd", 0o755)
	_, hostPriv := newSSHKey(b)
	blk, _ := ssh.MarshalPrivateKey(hostPriv, "")
	os.WriteFile(filepath.Join(dir, "host_ed25519"), pem.EncodeToMemory(blk), 0o600)
	os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(authorized), 0o600)
	port := freePort(b)
	cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/host_ed25519
PidFile %s/sshd.pid
AuthorizedKeysFile %s/authorized_keys
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PasswordAuthentication no
Subsystem sftp /usr/lib/openssh/sftp-server
SetEnv HOME=%s
`, port, dir, dir, dir, dir)
	cfgPath := filepath.Join(dir, "sshd_config")
	os.WriteFile(cfgPath, []byte(cfg), 0o600)
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", cfgPath)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !wait.Until(10*time.Second, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		b.Fatalf("sshd did not start: %s", out.String())
	}
	return port
}

// run runs one sftp batch against ours (ref false) or the reference.
func (s *sftpBench) run(b *testing.B, ref bool, batch string) {
	port, user := s.n.Config.System.SFTP.BindPort, sftpLogin("bench", sftpBenchServer)
	if ref {
		port, user = s.refPort, "root"
	}
	args := []string{"-F", "/dev/null", "-b", "-", "-i", s.key, "-P", strconv.Itoa(port),
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"}
	if c := os.Getenv("WHARF_BENCH_SFTP_CIPHER"); c != "" {
		args = append(args, "-c", c)
	}
	cmd := exec.Command("sftp", append(args, user+"@127.0.0.1")...)
	cmd.Stdin = strings.NewReader(batch)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("sftp (reference=%v): %v\n%s", ref, err, out)
	}
}

// ours runs a batch against the daemon while sampling its resident memory.
func (s *sftpBench) ours(b *testing.B, batch string) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if rss := procRSS(b, s.n.cmd.Process.Pid); rss > s.maxRSS {
				s.maxRSS = rss
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	cpu0 := procCPU(b, s.n.cmd.Process.Pid)
	s.run(b, false, batch)
	s.cpu += procCPU(b, s.n.cmd.Process.Pid) - cpu0
	s.runs++
	close(stop)
	wg.Wait()
}

func (s *sftpBench) report(b *testing.B) {
	b.ReportMetric(float64(s.startRSS)/(1<<20), "rss-idle-MiB")
	b.ReportMetric(float64(s.maxRSS)/(1<<20), "rss-max-MiB")
	if s.runs > 0 {
		b.ReportMetric(s.cpu.Seconds()/float64(s.runs), "daemon-cpu-s/op")
	}
}

func benchSize(env string) int64 {
	mb := int64(1024)
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
		mb = int64(v)
	}
	return mb << 20
}

func writeRandomFile(b *testing.B, path string, size int64) {
	b.Helper()
	cmd := exec.Command("head", "-c", strconv.FormatInt(size, 10), "/dev/urandom")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout = f
	if err := cmd.Run(); err != nil {
		b.Fatal(err)
	}
	f.Close()
}

func BenchmarkSFTPUploadFile(b *testing.B) {
	s := newSFTPBench(b)
	size := benchSize("WHARF_BENCH_FILE_MB")
	bench.WarmMemory(b, int(size)*3)
	src := filepath.Join(s.local, "big.bin")
	writeRandomFile(b, src, size)
	bench.Paired(b, size, func() func() {
		s.ours(b, "put "+src+" /big.bin\n")
		return func() { os.Remove(filepath.Join(s.srvDir, "big.bin")) }
	}, func() func() {
		s.run(b, true, "put "+src+" "+s.refRoot+"/big.bin\n")
		return func() { os.Remove(filepath.Join(s.refRoot, "big.bin")) }
	})
	s.report(b)
}

func BenchmarkSFTPDownloadFile(b *testing.B) {
	s := newSFTPBench(b)
	size := benchSize("WHARF_BENCH_FILE_MB")
	bench.WarmMemory(b, int(size)*3)
	writeRandomFile(b, filepath.Join(s.srvDir, "big.bin"), size)
	if err := exec.Command("cp", filepath.Join(s.srvDir, "big.bin"), filepath.Join(s.refRoot, "big.bin")).Run(); err != nil {
		b.Fatal(err)
	}
	dst := filepath.Join(s.local, "got.bin")
	bench.Paired(b, size, func() func() {
		s.ours(b, "get /big.bin "+dst+"\n")
		return func() { os.Remove(dst) }
	}, func() func() {
		s.run(b, true, "get "+s.refRoot+"/big.bin "+dst+"\n")
		return func() { os.Remove(dst) }
	})
	s.report(b)
}

func BenchmarkSFTPUploadTree(b *testing.B) {
	s := newSFTPBench(b)
	src := filepath.Join(s.local, "tree")
	size, err := tree.GameServer(src, benchSize("WHARF_BENCH_TREE_MB"))
	if err != nil {
		b.Fatal(err)
	}
	bench.WarmMemory(b, int(size)*3)
	bench.Paired(b, size, func() func() {
		s.ours(b, "put -R "+src+" /tree\n")
		return func() { os.RemoveAll(filepath.Join(s.srvDir, "tree")) }
	}, func() func() {
		s.run(b, true, "put -R "+src+" "+s.refRoot+"/tree\n")
		return func() { os.RemoveAll(filepath.Join(s.refRoot, "tree")) }
	})
	s.report(b)
}

func BenchmarkSFTPDownloadTree(b *testing.B) {
	s := newSFTPBench(b)
	size, err := tree.GameServer(filepath.Join(s.srvDir, "tree"), benchSize("WHARF_BENCH_TREE_MB"))
	if err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", filepath.Join(s.srvDir, "tree"), s.refRoot+"/").CombinedOutput(); err != nil {
		b.Fatalf("%v %s", err, out)
	}
	bench.WarmMemory(b, int(size)*3)
	dst := filepath.Join(s.local, "got")
	bench.Paired(b, size, func() func() {
		s.ours(b, "get -R /tree "+dst+"\n")
		return func() { os.RemoveAll(dst) }
	}, func() func() {
		s.run(b, true, "get -R "+s.refRoot+"/tree "+dst+"\n")
		return func() { os.RemoveAll(dst) }
	})
	s.report(b)
}
