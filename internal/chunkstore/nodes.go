package chunkstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// A repository is written by one node: two nodes sharing one (the same
// bucket and prefix, or the same directory) would each GC with an index
// the other's GC makes stale, and delete packs the other's backups still
// name (issue 33 item 10). A node that opens a repository for writing
// claims it with the object "nodes/<node id>" and refuses one another node
// claimed. A repository without any such object (written before this
// check) is claimed by the first node that opens it.

// nodesPrefix holds the claims.
const nodesPrefix = "nodes/"

// nodeIDPattern is what a node id may be to name its claim as it is (a
// panel's node uuid); any other is named by its hash.
var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// NodeObject is the object name of node's claim.
func NodeObject(node string) string {
	if nodeIDPattern.MatchString(node) {
		return nodesPrefix + node
	}
	sum := sha256.Sum256([]byte(node))
	return nodesPrefix + "h-" + hex.EncodeToString(sum[:16])
}

// SharedError is a repository another node claimed.
type SharedError struct {
	Node   string   // this node
	Others []string // the claims of the others (object names)
	// Exclusive: this node shares the repository, and the others claimed
	// it without sharing.
	Exclusive bool
}

func (e *SharedError) Error() string {
	return fmt.Sprintf("another node (%s) uses this backup repository", strings.Join(e.Others, ", "))
}

type nodeClaim struct {
	Node     string    `json:"node"`
	Hostname string    `json:"hostname,omitempty"`
	Claimed  time.Time `json:"claimed"`
	// Shared: the node shares the repository (issue 36); a claim without
	// it is exclusive.
	Shared bool `json:"shared,omitempty"`
}

// Claims lists the node claims of the repository in b (object names).
func Claims(ctx context.Context, b Backend) ([]string, error) {
	objs, err := b.List(ctx, nodesPrefix)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Name)
	}
	return out, nil
}

// Claim makes the repository node's, or returns a *SharedError when
// another node claimed it. Two nodes claiming at once may both be
// refused (each then sees the other's claim, and withdraws its own); never
// both accepted: each stores its claim before it lists the others.
func (s *Store) Claim(ctx context.Context, node string) error {
	if s.readOnly {
		return nil
	}
	return ClaimBackend(ctx, s.b, node)
}

// ClaimBackend is Claim on the repository in b before it is opened (so
// that a refused node does not read the index first).
func ClaimBackend(ctx context.Context, b Backend, node string) error {
	mine := NodeObject(node)
	others := func() ([]string, bool, error) {
		all, err := Claims(ctx, b)
		var out []string
		have := false
		for _, n := range all {
			if n == mine {
				have = true
			} else {
				out = append(out, n)
			}
		}
		return out, have, err
	}
	o, have, err := others()
	if err != nil {
		return fmt.Errorf("reading the repository's node claims: %w", err)
	}
	if len(o) > 0 {
		return &SharedError{Node: node, Others: o}
	}
	if have {
		return nil
	}
	host, _ := os.Hostname()
	claim, _ := json.Marshal(nodeClaim{Node: node, Hostname: host, Claimed: time.Now().UTC()})
	if err := b.Put(ctx, mine, claim); err != nil {
		return fmt.Errorf("claiming the repository for this node: %w", err)
	}
	o, _, err = others()
	if err != nil || len(o) > 0 {
		// Withdrawn, so that the other node is not refused for it.
		_ = b.Delete(ctx, mine)
		if err != nil {
			return fmt.Errorf("reading the repository's node claims: %w", err)
		}
		return &SharedError{Node: node, Others: o}
	}
	return nil
}

// ExistingLocalBackend is the backend of the directory dir, not created
// when absent (reading, as wharf diagnostics does).
func ExistingLocalBackend(dir string) *LocalBackend { return &LocalBackend{dir: dir} }
