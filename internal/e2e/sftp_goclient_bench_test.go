package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/testutil/bench"
)

// BenchmarkSFTPUploadFileGoClient: BenchmarkSFTPUploadFile's 1 GiB upload
// (WHARF_BENCH_FILE_MB) with the Go SFTP client (pkg/sftp, concurrent
// writes on, File.ReadFrom) instead of OpenSSH's, against the daemon alone
// (OpenSSH's sftp-server took 8 s for 64 MiB from this client: a reference
// run would dominate the benchmark). rss-max-MiB is the largest RSS at the
// end of a run (not sampled during it).
func BenchmarkSFTPUploadFileGoClient(b *testing.B) {
	s := newSFTPBench(b)
	size := benchSize("WHARF_BENCH_FILE_MB")
	bench.WarmMemory(b, int(size)*3)
	src := filepath.Join(s.local, "big.bin")
	writeRandomFile(b, src, size)
	pem, err := os.ReadFile(s.key)
	if err != nil {
		b.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		b.Fatal(err)
	}
	put := func(port int, user, dst string) {
		c, err := ssh.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &ssh.ClientConfig{
			User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		sc, err := sftp.NewClient(c, sftp.UseConcurrentWrites(true))
		if err != nil {
			b.Fatal(err)
		}
		defer sc.Close()
		in, err := os.Open(src)
		if err != nil {
			b.Fatal(err)
		}
		defer in.Close()
		out, err := sc.Create(dst)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := out.ReadFrom(in); err != nil || n != size {
			b.Fatalf("upload: %d bytes, %v", n, err)
		}
		if err := out.Close(); err != nil {
			b.Fatal(err)
		}
	}
	pid := s.n.cmd.Process.Pid
	b.SetBytes(size)
	for b.Loop() {
		cpu0 := procCPU(b, pid)
		put(s.n.Config.System.SFTP.BindPort, sftpLogin("bench", sftpBenchServer), "/big.bin")
		s.cpu += procCPU(b, pid) - cpu0
		s.runs++
		b.StopTimer()
		s.maxRSS = max(s.maxRSS, procRSS(b, pid))
		if err := os.Remove(filepath.Join(s.srvDir, "big.bin")); err != nil {
			b.Fatal(err)
		}
		syscall.Sync()
		b.StartTimer()
	}
	s.report(b)
}
