package chunkstore

import "container/list"

// The next backup of a server starts from the file index of its latest
// one (LatestFiles). Parsing that manifest back from its JSON is most of a
// small incremental backup's cost, so the Store keeps the manifests it
// committed last, per server, in memory, with their chunks' hashes
// decoded: LatestFiles uses one only when the newest manifest object of
// the server is still that very backup (same name and size), else it reads
// the object as before.
//
// Memory: a cached manifest is the parsed one plus 32 bytes a chunk:
// measured, 316 bytes a file for 32,000 files of 50-byte paths and 37,000
// chunks (~190 bytes a file and ~130 a chunk). latestCacheFiles bounds
// the files of all cached manifests together (the least recently used go
// first): ~80 MB on such trees. A server of more files than that is never
// cached (1M files would be ~0.3 GB): its manifest is parsed each time.
const latestCacheFiles = 256 << 10

// latestEntry is a committed manifest kept for the next backup.
type latestEntry struct {
	server string
	m      Manifest
	ids    []blobID // the hashes of m.Chunks, decoded
	size   int      // the manifest object's length
}

// latestCache is the committed manifests by server, least recently used
// last. Guarded by Store.mu.
type latestCache struct {
	order *list.List // of *latestEntry
	by    map[string]*list.Element
	files int
}

func (c *latestCache) init() {
	if c.by == nil {
		c.order, c.by = list.New(), map[string]*list.Element{}
	}
}

// put keeps e as the latest manifest of its server.
func (c *latestCache) put(e *latestEntry) {
	c.init()
	c.drop(e.server)
	if len(e.m.Files) == 0 || len(e.m.Files) > latestCacheFiles {
		return
	}
	c.by[e.server] = c.order.PushFront(e)
	c.files += len(e.m.Files)
	for c.files > latestCacheFiles {
		old := c.order.Back().Value.(*latestEntry)
		c.drop(old.server)
	}
}

// get is the cached manifest of server when it is backup, stored in size
// bytes; nil otherwise.
func (c *latestCache) get(server, backup string, size int64) *latestEntry {
	c.init()
	el, ok := c.by[server]
	if !ok {
		return nil
	}
	e := el.Value.(*latestEntry)
	if e.m.Backup != backup || int64(e.size) != size {
		return nil
	}
	c.order.MoveToFront(el)
	return e
}

func (c *latestCache) drop(server string) {
	c.init()
	if el, ok := c.by[server]; ok {
		c.files -= len(el.Value.(*latestEntry).m.Files)
		c.order.Remove(el)
		delete(c.by, server)
	}
}

// dropBackup forgets the manifest of server when it is backup's.
func (c *latestCache) dropBackup(server, backup string) {
	c.init()
	if el, ok := c.by[server]; ok && el.Value.(*latestEntry).m.Backup == backup {
		c.drop(server)
	}
}

// FileIndex is the file index of a server's latest backup, for its next
// backup (LatestIndex); one backup's own (Find keeps its place). The walk
// visits the files in the order that backup recorded them, so Find first
// tries the file after the last one it found: a map by path (a hash of
// every path, ~20 ms for 32,000 files) is built only when that misses.
type FileIndex struct {
	m       *Manifest // read-only: may be the cached one
	ids     []blobID  // m's chunk hashes decoded, or nil
	checked bool      // m is the cache's (PrevFile.checked)
	next    int
	by      map[string]int
}

// Find is the file of the index at path.
func (x *FileIndex) Find(path string) (PrevFile, bool) {
	if x == nil {
		return PrevFile{}, false
	}
	i := x.next
	if i >= len(x.m.Files) || x.m.Files[i].Path != path {
		if x.by == nil {
			x.by = make(map[string]int, len(x.m.Files))
			for j, f := range x.m.Files {
				x.by[f.Path] = j
			}
		}
		var ok bool
		if i, ok = x.by[path]; !ok {
			return PrevFile{}, false
		}
	}
	x.next = i + 1
	return x.file(x.m.Files[i])
}

// file is f with its entry's chunks.
func (x *FileIndex) file(f File) (PrevFile, bool) {
	cs, ok := x.m.Entry(f)
	if !ok {
		return PrevFile{}, false
	}
	p := PrevFile{File: f, Chunks: cs, checked: x.checked}
	if x.ids != nil {
		p.ids = x.ids[f.First : f.First+f.Count]
	}
	return p, true
}
