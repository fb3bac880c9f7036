package activity

import (
	"strings"
	"time"

	"github.com/wharf/wharf/internal/panel"
)

// SFTP records are merged before delivery, as Wings does (wings-facts
// §9.4): records with the same user, server, IP, event and minute become
// one whose metadata.files lists every file in order, with the earliest
// timestamp. An upload of a thousand files is then a few rows in the panel,
// not a thousand. Merging happens within a batch read from the queue; a
// batch reads at most mergeFactor times its size in records.
const (
	mergePrefix = "server:sftp."
	mergeFactor = 10
)

type mergeKey struct {
	user, server, ip, event string
	minute                  int64
}

// DefaultMergeWindow is the span of time whose SFTP records merge: Wings'
// minute.
const DefaultMergeWindow = time.Minute

// merger indexes the mergeable records of one batch.
type merger struct {
	window time.Duration
	index  map[mergeKey]int
}

func newMerger(window time.Duration) merger {
	return merger{window: window, index: map[mergeKey]int{}}
}

func (m merger) keyOf(a panel.Activity) (mergeKey, bool) {
	if !strings.HasPrefix(a.Event, mergePrefix) {
		return mergeKey{}, false
	}
	if _, ok := a.Metadata["files"].([]any); !ok {
		return mergeKey{}, false
	}
	k := mergeKey{server: a.Server, ip: a.IP, event: a.Event, minute: a.Timestamp.Truncate(m.window).Unix()}
	if a.User != nil {
		k.user = *a.User
	}
	return k, true
}

// into merges a into the batch and reports whether it did.
func (m merger) into(batch []panel.Activity, a panel.Activity) bool {
	k, ok := m.keyOf(a)
	if !ok {
		return false
	}
	i, ok := m.index[k]
	if !ok {
		return false
	}
	g := &batch[i]
	g.Metadata["files"] = append(g.Metadata["files"].([]any), a.Metadata["files"].([]any)...)
	if a.Timestamp.Before(g.Timestamp) {
		g.Timestamp = a.Timestamp
	}
	return true
}

// added indexes the record just appended to the batch.
func (m merger) added(batch []panel.Activity) {
	a := batch[len(batch)-1]
	if k, ok := m.keyOf(a); ok {
		m.index[k] = len(batch) - 1
	}
}
