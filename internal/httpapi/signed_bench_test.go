package httpapi

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
)

const benchFileSize = 1 << 30

// benchNode is the real handler with a real sandbox behind a loopback HTTP server.
func benchNode(b testing.TB) (srv *httptest.Server, token string, dataDir string) {
	dir := b.TempDir()
	c := config.Defaults()
	c.UUID, c.TokenID, c.Token, c.Remote = uuid.NewString(), "t", testToken, "https://panel.example.com"
	c.System.RootDirectory, c.System.Data = dir, filepath.Join(dir, "volumes")
	c.API.UploadLimit = 2048
	c.System.User.UID, c.System.User.GID = -1, -1
	path := filepath.Join(dir, "config.yml")
	if err := c.Save(path); err != nil {
		b.Fatal(err)
	}
	store := config.NewStore(path, c)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr := server.NewManager(context.Background(), &server.Deps{Config: store, Log: log})
	id := uuid.NewString()
	def, err := server.ParseDefinition([]byte(fmt.Sprintf(`{"uuid":%q}`, id)), nil, true)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := mgr.Add(def); err != nil {
		b.Fatal(err)
	}
	ots, err := tokens.OpenOneTimeStore(filepath.Join(dir, "ids"), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ots.Close() })
	api := New(Deps{Config: store, Servers: mgr, Log: log, OneTime: ots,
		Tokens: tokens.NewVerifier(func() []byte { return []byte(testToken) }, time.Now)})
	srv = httptest.NewServer(api.Handler())
	b.Cleanup(srv.Close)
	return srv, id, filepath.Join(c.System.Data, id)
}

func writeRandomFile(b testing.TB, path string, size int64) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		b.Fatal(err)
	}
}

func signed(b testing.TB, claims map[string]any) string {
	claims["exp"] = time.Now().Add(time.Hour).Unix()
	claims["unique_id"] = uuid.NewString()
	t, err := tokens.Sign([]byte(testToken), claims)
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// BenchmarkCopyBaseline is the reference: a plain file copy on the same disk.
func BenchmarkCopyBaseline(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	writeRandomFile(b, src, benchFileSize)
	b.SetBytes(benchFileSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		in, _ := os.Open(src)
		out, _ := os.Create(filepath.Join(dir, "dst"))
		if _, err := io.Copy(out, in); err != nil {
			b.Fatal(err)
		}
		_ = out.Sync()
		in.Close()
		out.Close()
	}
}

// BenchmarkSignedDownload streams a 1 GiB file through GET /download/file.
func BenchmarkSignedDownload(b *testing.B) {
	srv, id, data := benchNode(b)
	writeRandomFile(b, filepath.Join(data, "world.bin"), benchFileSize)
	b.SetBytes(benchFileSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok := signed(b, map[string]any{"file_path": "world.bin", "server_uuid": id})
		res, err := http.Get(srv.URL + "/download/file?token=" + tok)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || n != benchFileSize {
			b.Fatalf("status %d, %d bytes", res.StatusCode, n)
		}
	}
}

// BenchmarkSignedUpload streams a 1 GiB multipart upload through POST /upload/file.
func BenchmarkSignedUpload(b *testing.B) {
	srv, id, data := benchNode(b)
	src := filepath.Join(b.TempDir(), "upload.bin")
	writeRandomFile(b, src, benchFileSize)
	b.SetBytes(benchFileSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			fw, _ := mw.CreateFormFile("files", "upload.bin")
			f, _ := os.Open(src)
			_, err := io.Copy(fw, f)
			f.Close()
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
		tok := signed(b, map[string]any{"server_uuid": id, "user_uuid": uuid.NewString()})
		res, err := http.Post(srv.URL+"/upload/file?directory=/&token="+tok, mw.FormDataContentType(), pr)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("status %d", res.StatusCode)
		}
	}
	b.StopTimer()
	if st, err := os.Stat(filepath.Join(data, "upload.bin")); err != nil || st.Size() != benchFileSize {
		b.Fatalf("uploaded file: %v %v", st, err)
	}
}
