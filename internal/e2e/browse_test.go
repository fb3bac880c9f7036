package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// The backups folder (issue 35) on the real binary: the file manager, the
// signed download and SFTP over a server's repository backups.

type browseStat struct {
	Name      string `json:"name"`
	Modified  string `json:"modified"`
	Mode      string `json:"mode"`
	Size      int64  `json:"size"`
	Directory bool   `json:"directory"`
	File      bool   `json:"file"`
	Symlink   bool   `json:"symlink"`
	Mime      string `json:"mime"`
}

// browseNode starts a container-free node whose backups go to the
// repository, its server with a denylist (*.secret) and a disk limit of
// diskMB, an SFTP user with every permission, and makes two backups of a
// tree (a.txt changed between them).
func browseNode(t *testing.T, diskMB int) (n *node, c *sftpSession, dir, id1, id2 string, big string) {
	t.Helper()
	srv := gameServer(backupServer)
	srv.Settings["build"] = map[string]any{"memory_limit": 128, "disk_space": diskMB}
	srv.Settings["egg"] = map[string]any{"file_denylist": []string{"*.secret"}}
	n = startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{srv},
		mutate: func(c *config.Config) { c.System.Backups.Format = config.BackupFormatRepository }})
	dir = n.serverDir(backupServer)
	big = randomBytes(3<<20 + 77)
	writeFiles(t, dir, map[string]string{
		"a.txt": "old a", "cfg/server.properties": "motd=old\n", "cfg/ops.json": "[]",
		"world/region.bin": big, "keys/token.secret": "s3cr3t",
		// Names the game wrote before the backup.
		"hostile/..\\..\\x": "bs", "hostile/a\nb": "nl", "hostile/--help": "dash",
		"hostile/.backups": "nested", "hostile/ünï €": "utf",
	})
	os.Chmod(filepath.Join(dir, "cfg/server.properties"), 0o600)
	if err := os.Symlink("../../../../../../etc/passwd", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	id1 = newBackupID()
	if st := n.backup(id1, "local", ""); !st.Successful {
		t.Fatalf("backup: %+v\n%s", st, n.log)
	}
	writeFiles(t, dir, map[string]string{"a.txt": "new a, longer"})
	id2 = newBackupID()
	if st := n.backup(id2, "local", ""); !st.Successful {
		t.Fatalf("backup: %+v\n%s", st, n.log)
	}
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: backupServer, User: sftpOwner, Permissions: []string{"*"}})
	c = n.sftpOpen(t, sftpLogin("alice", backupServer), ssh.Password(sftpPass))
	return n, c, dir, id1, id2, big
}

func (n *node) list(dir string) (int, []browseStat, []byte) {
	n.t.Helper()
	res, body := n.request("GET", "/api/servers/"+backupServer+"/files/list-directory?directory="+url.QueryEscape(dir), nil, "")
	var out []browseStat
	if res.StatusCode == 200 {
		if err := json.Unmarshal(body, &out); err != nil {
			n.t.Fatalf("list %s: %v: %s", dir, err, body)
		}
	}
	return res.StatusCode, out, body
}

func (n *node) contents(file string) (*httpResult, []byte) {
	n.t.Helper()
	res, body := n.request("GET", "/api/servers/"+backupServer+"/files/contents?file="+url.QueryEscape(file), nil, "")
	return &httpResult{res.StatusCode, res.Header.Get("Content-Length"), res.Header.Get("Content-Type")}, body
}

type httpResult struct {
	code          int
	length, ctype string
}

func names(l []browseStat) []string {
	var out []string
	for _, s := range l {
		out = append(out, s.Name)
	}
	return out
}

func find(l []browseStat, name string) (browseStat, bool) {
	for _, s := range l {
		if s.Name == name {
			return s, true
		}
	}
	return browseStat{}, false
}

// treeSnapshot maps every entry under root to its mode and content.
func treeSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(root, p)
		v := fi.Mode().String()
		if d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	return out
}

// TestBrowseBackupsFileManager: the folder lists the backups by UUID and
// each backup's tree, reads old contents after the live file changed
// (contents and the signed download), refuses links, denied files and
// missing names, and leaves a deleted backup at once.
func TestBrowseBackupsFileManager(t *testing.T) {
	t.Parallel()
	n, _, dir, id1, id2, big := browseNode(t, 0)
	// Disk usage counts the live tree only: two backups of a 3 MiB tree
	// in the folder would triple it (checked before the compress below adds its archive).
	var disk float64
	wait.For(t, 60*time.Second, func() bool {
		disk = n.details(backupServer)["utilization"].(map[string]any)["disk_bytes"].(float64)
		return disk >= float64(len(big)) // control: the tree was measured
	}, "the server's disk usage to count its tree")
	if disk > float64(len(big))+1<<20 {
		t.Fatalf("disk usage %.0f bytes for a tree of %d: the folder is counted", disk, len(big))
	}

	code, root, body := n.list("/")
	if code != 200 {
		t.Fatalf("list /: %d %s", code, body)
	}
	if s, ok := find(root, ".backups"); !ok || !s.Directory || s.Mime != "inode/directory" {
		t.Fatalf("no .backups directory at the root: %s", body)
	}
	code, bs, body := n.list("/.backups")
	if code != 200 || !slices.Equal(names(bs), sortedIDs(id1, id2)) || !bs[0].Directory || bs[0].Modified == "" {
		t.Fatalf("list /.backups: %d %s", code, body)
	}
	code, l, body := n.list("/.backups/" + id1)
	if code != 200 {
		t.Fatalf("list backup: %d %s", code, body)
	}
	for _, want := range []string{"a.txt", "cfg", "world", "keys", "hostile", "escape"} {
		if _, ok := find(l, want); !ok {
			t.Errorf("%s missing from the backup's listing: %s", want, body)
		}
	}
	if s, _ := find(l, "escape"); !s.Symlink {
		t.Errorf("escape not listed as a link: %+v", s)
	}
	if s, _ := find(l, "a.txt"); s.Size != 5 || !s.File {
		t.Errorf("a.txt: %+v", s)
	}
	if _, ok := find(l, ".backups"); ok {
		t.Error("the folder is inside a backup")
	}

	// Old contents after the live file changed, with Content-Length.
	for file, want := range map[string]string{"/.backups/" + id1 + "/a.txt": "old a", "/.backups/" + id2 + "/a.txt": "new a, longer", "a.txt": "new a, longer"} {
		r, b := n.contents(file)
		if r.code != 200 || string(b) != want || r.length != itoa(len(want)) {
			t.Errorf("contents %s: %+v %q", file, r, b)
		}
	}
	r, b := n.contents("/.backups/" + id1 + "/world/region.bin")
	if r.code != 200 || b2s(b) != big {
		t.Fatalf("contents region.bin: %+v, %d bytes", r, len(b))
	}
	// The signed download (the Files tab's Download button).
	tok := n.signURL(map[string]any{"file_path": "/.backups/" + id1 + "/world/region.bin", "server_uuid": backupServer, "unique_id": uuid.NewString()})
	res, b := n.get("/download/file?token=" + tok)
	if res.StatusCode != 200 || b2s(b) != big || res.Header.Get("Content-Length") != itoa(len(big)) ||
		!strings.Contains(res.Header.Get("Content-Disposition"), "region.bin") {
		t.Fatalf("signed download: %d %v, %d bytes", res.StatusCode, res.Header, len(b))
	}

	// Missing names: 404 JSON; a denied file: 403; a link: not followed.
	for file, want := range map[string]int{
		"/.backups/" + id1 + "/nothing.txt": 404, "/.backups/" + newBackupID() + "/a.txt": 404,
		"/.backups/" + id1 + "/keys/token.secret": 403, "/.backups/" + id1 + "/escape": 400,
		"/.backups/" + id1 + "/cfg": 400,
	} {
		res, body := n.request("GET", "/api/servers/"+backupServer+"/files/contents?file="+url.QueryEscape(file), nil, "")
		assertJSONError(t, res, body, want)
		if bytes.Contains(body, []byte("root:")) {
			t.Fatalf("%s: the link was followed: %s", file, body)
		}
	}
	if code, _, body := n.list("/.backups/" + id1 + "/nope"); code != 404 {
		t.Fatalf("list of a missing directory: %d %s", code, body)
	}

	// A deleted backup leaves the folder at once.
	if res, body := n.request("DELETE", "/api/servers/"+backupServer+"/backup/"+id1, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	if _, bs, _ := n.list("/.backups"); !slices.Equal(names(bs), []string{id2}) {
		t.Fatalf("after the delete: %v", names(bs))
	}
	if r, _ := n.contents("/.backups/" + id1 + "/a.txt"); r.code != 404 {
		t.Fatalf("a deleted backup's file: %+v", r)
	}
	_ = dir
}

func sortedIDs(ids ...string) []string { slices.Sort(ids); return ids }

func itoa(n int) string { return strconv.Itoa(n) }

func b2s(b []byte) string { return string(b) }

// TestBrowseBackupsReadOnly: every write route of the file manager and of
// SFTP is refused inside the folder with a 4xx JSON error (SFTP:
// permission denied), and nothing changes, on disk or in the backup.
func TestBrowseBackupsReadOnly(t *testing.T) {
	t.Parallel()
	n, c, dir, id1, _, _ := browseNode(t, 0)
	in := "/.backups/" + id1
	before := treeSnapshot(t, dir)
	_, listBefore, _ := n.list(in + "/cfg")
	api := "/api/servers/" + backupServer + "/files/"
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"POST", api + "write?file=" + url.QueryEscape(in+"/a.txt"), "x"},
		{"POST", api + "write?file=" + url.QueryEscape(in+"/new.txt"), "x"},
		{"POST", api + "create-directory", map[string]any{"name": "d", "path": in}},
		{"POST", api + "create-directory", map[string]any{"name": ".backups", "path": "/"}},
		{"POST", api + "delete", map[string]any{"root": in, "files": []string{"a.txt"}}},
		{"POST", api + "delete", map[string]any{"root": "/", "files": []string{".backups"}}},
		{"POST", api + "chmod", map[string]any{"root": in, "files": []map[string]string{{"file": "a.txt", "mode": "777"}}}},
		{"POST", api + "compress", map[string]any{"root": in, "files": []string{"a.txt"}}},
		{"POST", api + "decompress", map[string]any{"root": in, "file": "a.txt"}},
		{"POST", api + "copy", map[string]any{"location": in + "/a.txt"}},
		{"POST", api + "pull", map[string]any{"url": "http://127.0.0.1:1/x", "root": in}},
		{"PUT", api + "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "a.txt", "to": in + "/a2.txt"}}}},
		{"PUT", api + "rename", map[string]any{"root": in, "files": []map[string]string{{"from": "a.txt", "to": "b.txt"}}}},
	} {
		res, body := n.request(tc.method, tc.path, tc.body, "")
		if res.StatusCode < 400 || res.StatusCode >= 500 || !bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("%s %s %v: %d %s", tc.method, tc.path, tc.body, res.StatusCode, body)
		}
	}
	res, body := n.upload("?directory="+url.QueryEscape(in)+"&token="+n.signURL(map[string]any{"server_uuid": backupServer, "user_uuid": uuid.NewString(), "unique_id": uuid.NewString()}),
		map[string][]byte{"u.txt": []byte("u")})
	if res.StatusCode < 400 || res.StatusCode >= 500 || !bytes.Contains(body, []byte(`"error"`)) {
		t.Errorf("upload into the folder: %d %s", res.StatusCode, body)
	}

	// SFTP: every change inside is permission denied.
	if f, err := c.Create(in + "/new.txt"); err == nil || fxCode(err) != 3 {
		if f != nil {
			f.Close()
		}
		t.Errorf("sftp create: %v", err)
	}
	for what, err := range map[string]error{
		"mkdir":          c.Mkdir(in + "/d"),
		"remove":         c.Remove(in + "/a.txt"),
		"rmdir":          c.RemoveDirectory(in + "/cfg"),
		"chmod":          c.Chmod(in+"/a.txt", 0o777),
		"rename into":    c.Rename("/a.txt", in+"/z.txt"),
		"rename inside":  c.Rename(in+"/a.txt", in+"/z.txt"),
		"symlink":        c.Symlink("/a.txt", in+"/l"),
		"remove folder":  c.RemoveDirectory("/.backups"),
		"rename to root": c.Rename("/a.txt", "/.backups"),
	} {
		if fxCode(err) != 3 {
			t.Errorf("sftp %s: %v (code %d)", what, err, fxCode(err))
		}
	}
	if after := treeSnapshot(t, dir); !mapsEqual(before, after) {
		t.Fatalf("the live tree changed:\nbefore %v\nafter  %v", before, after)
	}
	if _, listAfter, _ := n.list(in + "/cfg"); !slices.Equal(names(listBefore), names(listAfter)) {
		t.Fatalf("the backup changed: %v → %v", names(listBefore), names(listAfter))
	}
	// Control: the same rename to a name outside the folder moves the file.
	res, body = n.request("PUT", api+"rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "a.txt", "to": "moved.txt"}}}, "")
	if res.StatusCode != 204 {
		t.Fatalf("control rename: %d %s", res.StatusCode, body)
	}
	if _, err := os.Stat(filepath.Join(dir, "moved.txt")); err != nil {
		t.Fatalf("control rename: %v", err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestBrowseBackupsRestoreByRename: a rename out of the folder copies a
// file or a directory out (modes kept, the backup unchanged), refuses an
// existing destination, a denied file, and a copy over the disk limit
// (nothing left behind); SFTP's rename does the same.
func TestBrowseBackupsRestoreByRename(t *testing.T) {
	t.Parallel()
	n, c, dir, id1, _, big := browseNode(t, 2) // 2 MiB: region.bin (3 MiB) does not fit
	in := "/.backups/" + id1
	api := "/api/servers/" + backupServer + "/files/rename"
	rename := func(root, from, to string) (int, []byte) {
		res, body := n.request("PUT", api, map[string]any{"root": root, "files": []map[string]string{{"from": from, "to": to}}}, "")
		return res.StatusCode, body
	}
	// As the Files tab's Move sends it: the destination relative to the
	// directory shown.
	if code, body := rename(in, "a.txt", "../../restored/a.txt"); code != 204 {
		t.Fatalf("restore a file: %d %s", code, body)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "restored/a.txt")); string(b) != "old a" {
		t.Fatalf("restored a.txt: %q", b)
	}
	if code, body := rename("/", in+"/cfg", "cfg-old"); code != 204 {
		t.Fatalf("restore a directory: %d %s", code, body)
	}
	fi, err := os.Stat(filepath.Join(dir, "cfg-old/server.properties"))
	if b, _ := os.ReadFile(filepath.Join(dir, "cfg-old/server.properties")); err != nil || string(b) != "motd=old\n" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("restored directory: %v %v %q", fi, err, b)
	}
	// An existing destination: 400, nothing changed.
	code, body := rename(in, "a.txt", "../../a.txt")
	if code != 400 || !bytes.Contains(body, []byte(`"error"`)) {
		t.Fatalf("onto an existing file: %d %s", code, body)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "new a, longer" {
		t.Fatalf("a.txt changed: %q", b)
	}
	// A denied file: 403; a directory holding one is restored without it.
	if code, body := rename(in, "keys/token.secret", "../../t.secret2"); code != 403 {
		t.Fatalf("restore a denied file: %d %s", code, body)
	}
	if code, body := rename(in, "keys", "../../keys-old"); code != 204 {
		t.Fatalf("restore keys: %d %s", code, body)
	}
	if _, err := os.Lstat(filepath.Join(dir, "keys-old/token.secret")); !os.IsNotExist(err) {
		t.Fatalf("a denied file was restored: %v", err)
	}
	// Over the disk limit: refused, nothing left.
	if code, body := rename(in, "world", "../../world-old"); code != 400 || !bytes.Contains(body, []byte("disk space")) {
		t.Fatalf("a copy over the disk limit: %d %s", code, body)
	}
	if _, err := os.Lstat(filepath.Join(dir, "world-old")); !os.IsNotExist(err) {
		t.Fatalf("world-old left behind: %v", err)
	}
	// SFTP: stat, ls and get inside; rename out restores.
	if fi, err := c.Stat(in + "/a.txt"); err != nil || fi.Size() != 5 {
		t.Fatalf("sftp stat: %v %v", fi, err)
	}
	ents, err := c.ReadDir("/")
	if err != nil || !slices.ContainsFunc(ents, func(e os.FileInfo) bool { return e.Name() == ".backups" && e.IsDir() }) {
		t.Fatalf("sftp ls /: %v", err)
	}
	ents, err = c.ReadDir(in + "/hostile")
	if err != nil || len(ents) != 5 {
		t.Fatalf("sftp ls hostile: %d, %v", len(ents), err)
	}
	if b, err := getFile(c, in+"/world/region.bin"); err != nil || string(b) != big {
		t.Fatalf("sftp get: %d bytes, %v", len(b), err)
	}
	if fi, err := c.Lstat(in + "/escape"); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("sftp lstat of a link: %v %v", fi, err)
	}
	if target, err := c.ReadLink(in + "/escape"); err != nil || !strings.HasSuffix(target, "etc/passwd") {
		t.Fatalf("sftp readlink: %q %v", target, err)
	}
	if b, err := getFile(c, in+"/escape"); err == nil || bytes.Contains(b, []byte("root:")) {
		t.Fatalf("sftp get of a link: %q %v", b, err)
	}
	if err := c.Rename(in+"/cfg/ops.json", "/ops-old.json"); err != nil {
		t.Fatalf("sftp rename out: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ops-old.json")); string(b) != "[]" {
		t.Fatalf("sftp restored: %q", b)
	}
	// The backup is unchanged.
	if r, b := n.contents(in + "/cfg/ops.json"); r.code != 200 || string(b) != "[]" {
		t.Fatalf("after the restores: %+v %q", r, b)
	}
}

// TestBrowseBackupsHostileNamesAttack: names the game wrote before the
// backup (backslashes and dots, a newline, a leading dash, a nested
// ".backups", UTF-8) are listed, read and restored as the names they are,
// inside the server; the link pointing outside is restored as a link,
// never followed.
func TestBrowseBackupsHostileNamesAttack(t *testing.T) {
	t.Parallel()
	n, _, dir, id1, _, _ := browseNode(t, 0)
	in := "/.backups/" + id1 + "/hostile"
	_, l, body := n.list(in)
	want := []string{"--help", ".backups", "..\\..\\x", "a\nb", "ünï €"}
	got := names(l)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("hostile names: %q\n%s", got, body)
	}
	for name, content := range map[string]string{"--help": "dash", ".backups": "nested", "..\\..\\x": "bs", "a\nb": "nl", "ünï €": "utf"} {
		if r, b := n.contents(in + "/" + name); r.code != 200 || string(b) != content {
			t.Errorf("%q: %+v %q", name, r, b)
		}
	}
	res, body2 := n.request("PUT", "/api/servers/"+backupServer+"/files/rename",
		map[string]any{"root": "/", "files": []map[string]string{{"from": in, "to": "hostile-old"}, {"from": from(id1, "escape"), "to": "escape-old"}}}, "")
	if res.StatusCode != 204 {
		t.Fatalf("restore: %d %s", res.StatusCode, body2)
	}
	for name, content := range map[string]string{"--help": "dash", ".backups": "nested", "..\\..\\x": "bs", "a\nb": "nl"} {
		if b, err := os.ReadFile(filepath.Join(dir, "hostile-old", name)); err != nil || string(b) != content {
			t.Errorf("restored %q: %q %v", name, b, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(dir, "escape-old")); err != nil || !strings.HasSuffix(target, "etc/passwd") {
		t.Fatalf("restored link: %q %v", target, err)
	}
	// Control: the link's target exists on the host, so following it
	// would have answered its contents.
	if b, err := os.ReadFile("/etc/passwd"); err != nil || !bytes.Contains(b, []byte("root:")) {
		t.Fatalf("control: /etc/passwd: %v", err)
	}
	if r, b := n.contents("escape-old"); r.code < 400 || bytes.Contains(b, []byte("root:")) {
		t.Fatalf("the restored link reads outside: %+v", r)
	}
	// Nothing was written outside the server's directory.
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), "x")); !os.IsNotExist(err) {
		t.Fatalf("a name escaped: %v", err)
	}
}

func from(id, name string) string { return "/.backups/" + id + "/" + name }

// TestBrowseBackupsNotPartOfTheServer: compress of the root naming the
// folder (the panel's "select all") answers 200 without it, a new backup
// and the disk hold nothing of it, and a real entry of its name at the
// root stays reachable and untouched (the folder steps aside).
func TestBrowseBackupsNotPartOfTheServer(t *testing.T) {
	t.Parallel()
	n, _, dir, id1, id2, big := browseNode(t, 0)
	// Disk usage counts the live tree only: two backups of a 3 MiB tree
	// in the folder would triple it (checked before the compress below adds its archive).
	var disk float64
	wait.For(t, 60*time.Second, func() bool {
		disk = n.details(backupServer)["utilization"].(map[string]any)["disk_bytes"].(float64)
		return disk >= float64(len(big)) // control: the tree was measured
	}, "the server's disk usage to count its tree")
	if disk > float64(len(big))+1<<20 {
		t.Fatalf("disk usage %.0f bytes for a tree of %d: the folder is counted", disk, len(big))
	}
	_, root, _ := n.list("/")
	res, body := n.request("POST", "/api/servers/"+backupServer+"/files/compress", map[string]any{"root": "/", "files": names(root)}, "")
	if res.StatusCode != 200 {
		t.Fatalf("compress of /: %d %s", res.StatusCode, body)
	}
	var st browseStat
	json.Unmarshal(body, &st)
	f, err := os.Open(filepath.Join(dir, st.Name))
	if err != nil {
		t.Fatalf("archive %q: %v", st.Name, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	sawA := false
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if strings.HasPrefix(h.Name, ".backups") {
			t.Fatalf("the folder is in the archive: %s", h.Name)
		}
		sawA = sawA || h.Name == "a.txt"
	}
	if !sawA {
		t.Fatal("control: a.txt not in the archive")
	}
	if _, err := os.Lstat(filepath.Join(dir, ".backups")); !os.IsNotExist(err) {
		t.Fatalf("the folder is on disk: %v", err)
	}
	// A new backup does not hold it.
	id3 := newBackupID()
	if st := n.backup(id3, "local", ""); !st.Successful {
		t.Fatalf("backup: %+v", st)
	}
	_, l, _ := n.list("/.backups/" + id3)
	if _, ok := find(l, ".backups"); ok || len(l) == 0 {
		t.Fatalf("the third backup: %v", names(l))
	}
	// A real .backups at the root wins.
	writeFiles(t, dir, map[string]string{".backups/mine.txt": "mine"})
	if _, l, body := n.list("/.backups"); !slices.Equal(names(l), []string{"mine.txt"}) {
		t.Fatalf("a real .backups: %s", body)
	}
	if r, b := n.contents("/.backups/mine.txt"); r.code != 200 || string(b) != "mine" {
		t.Fatalf("a real .backups file: %+v %q", r, b)
	}
	_, _ = id1, id2
}

// TestBrowseBackupsS3Repository: the folder over a repository in an S3
// bucket (versitygw): listing, old contents, a restore by rename, and a
// deleted backup gone.
func TestBrowseBackupsS3Repository(t *testing.T) {
	t.Parallel()
	r := s3RepositoryNode(t, objectstore.StartOrSkip(t), "")
	n := r.node
	dir := n.serverDir(backupServer)
	big := randomBytes(5 << 20)
	writeFiles(t, dir, map[string]string{"a.txt": "old a", "world/r.bin": big})
	id1 := newBackupID()
	if st := n.backup(id1, "local", ""); !st.Successful {
		t.Fatalf("backup: %+v\n%s", st, n.log)
	}
	writeFiles(t, dir, map[string]string{"a.txt": "new a"})
	id2 := newBackupID()
	if st := n.backup(id2, "local", ""); !st.Successful {
		t.Fatalf("backup: %+v\n%s", st, n.log)
	}
	if _, l, body := n.list("/.backups"); !slices.Equal(names(l), sortedIDs(id1, id2)) {
		t.Fatalf("list /.backups: %s", body)
	}
	// The stored index of each backup is in the bucket (issue 35
	// follow-up) beside its manifest; a directory of a backup lists.
	for _, id := range []string{id1, id2} {
		for _, key := range []string{"views/" + backupServer + "/" + id, "views/" + backupServer + "/" + id + ".dirs"} {
			if r.getIfExists(t, key) == nil {
				t.Fatalf("no %s in the bucket", key)
			}
		}
	}
	if code, l, body := n.list("/.backups/" + id2 + "/world"); code != 200 || !slices.Equal(names(l), []string{"r.bin"}) {
		t.Fatalf("list of a backup's directory: %d %s", code, body)
	}
	if res, b := n.contents("/.backups/" + id1 + "/a.txt"); res.code != 200 || string(b) != "old a" {
		t.Fatalf("old a.txt: %+v %q", res, b)
	}
	if res, b := n.contents("/.backups/" + id1 + "/world/r.bin"); res.code != 200 || string(b) != big {
		t.Fatalf("r.bin: %+v %d bytes", res, len(b))
	}
	res, body := n.request("PUT", "/api/servers/"+backupServer+"/files/rename",
		map[string]any{"root": "/.backups/" + id1, "files": []map[string]string{{"from": "world", "to": "../../world-old"}}}, "")
	if res.StatusCode != 204 {
		t.Fatalf("restore: %d %s", res.StatusCode, body)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "world-old/r.bin")); string(b) != big {
		t.Fatalf("restored r.bin: %d bytes", len(b))
	}
	if res, body := n.request("DELETE", "/api/servers/"+backupServer+"/backup/"+id1, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	if _, l, body := n.list("/.backups"); !slices.Equal(names(l), []string{id2}) {
		t.Fatalf("after the delete: %s", body)
	}
	if r.getIfExists(t, "views/"+backupServer+"/"+id1) != nil || r.getIfExists(t, "views/"+backupServer+"/"+id1+".dirs") != nil {
		t.Fatal("the stored index of a deleted backup is still in the bucket")
	}
}

// TestBrowseBackupsStoredIndexAfterRestart (issue 35 follow-up, "the first
// listing"): after a restart of the daemon, a backup's directories are
// listed from the index stored beside its manifest at backup time, with
// the repository's packs moved away (no chunk is read); control: with
// neither the index nor the packs the listing fails; a backup whose index
// is gone (made before it) is listed from its manifest and chunks as
// before, the same.
func TestBrowseBackupsStoredIndexAfterRestart(t *testing.T) {
	t.Parallel()
	n, _, _, id1, _, _ := browseNode(t, 0)
	repo := n.Config.BackupRepositoryPath()
	if _, err := os.Stat(filepath.Join(repo, "views", backupServer, id1)); err != nil {
		t.Fatalf("no index stored beside the backup: %v", err)
	}
	dirs := []string{"/.backups/" + id1, "/.backups/" + id1 + "/cfg", "/.backups/" + id1 + "/hostile"}
	listAll := func() (map[string]string, bool) {
		out := map[string]string{}
		for _, d := range dirs {
			code, _, body := n.list(d)
			if code != 200 {
				return nil, false
			}
			out[d] = string(body)
		}
		return out, true
	}
	packs, away := filepath.Join(repo, "packs"), filepath.Join(repo, "packs.away")
	n.stop()
	if err := os.Rename(packs, away); err != nil {
		t.Fatal(err)
	}
	n.restart()
	indexed, ok := listAll()
	if !ok {
		t.Fatalf("listing from the stored index after a restart failed\n%s", n.log)
	}
	for _, want := range []string{`"name":"escape"`, `"name":"a.txt"`, `"name":"cfg"`} {
		if !strings.Contains(indexed[dirs[0]], want) {
			t.Errorf("%s missing from the listing: %s", want, indexed[dirs[0]])
		}
	}
	n.stop()
	if err := os.RemoveAll(filepath.Join(repo, "views")); err != nil {
		t.Fatal(err)
	}
	n.restart()
	if _, ok := listAll(); ok {
		t.Fatal("control: listing with neither the index nor the packs succeeded")
	}
	n.stop()
	if err := os.Rename(away, packs); err != nil {
		t.Fatal(err)
	}
	n.restart()
	built, ok := listAll()
	if !ok {
		t.Fatalf("listing from the manifest failed\n%s", n.log)
	}
	for _, d := range dirs {
		if indexed[d] != built[d] {
			t.Errorf("%s: from the index %s\nfrom the manifest %s", d, indexed[d], built[d])
		}
	}
}
