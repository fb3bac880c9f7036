package backup

import (
	"errors"
	"fmt"
	"testing"
)

// TestPlanRestore: the one decision of a restore's source and steps, over
// its four facts (adapter, truncate_directory, a local archive on the node,
// a bare repository stream), every combination.
func TestPlanRestore(t *testing.T) {
	type row struct {
		adapter                   Adapter
		truncate, localFile, bare bool
		want                      restorePlan
		err                       error
	}
	var rows []row
	for _, truncate := range []bool{false, true} {
		for _, localFile := range []bool{false, true} {
			for _, bare := range []bool{false, true} {
				// object_store: the download, whatever is on the node.
				rows = append(rows, row{ObjectStore, truncate, localFile, bare,
					restorePlan{source: sourceDownload, truncate: truncate, adapter: ObjectStore, from: "remote"}, nil})
				rows = append(rows, row{"s3", truncate, localFile, bare, restorePlan{}, ErrBadAdapter})
				rows = append(rows, row{"", truncate, localFile, bare, restorePlan{}, ErrBadAdapter})
			}
		}
	}
	local := func(p restorePlan) restorePlan { p.adapter, p.from = Local, "local"; return p }
	rows = append(rows,
		// The node's archive: read whole first only when the directory is emptied.
		row{Local, false, true, false, local(restorePlan{source: sourceArchive}), nil},
		row{Local, false, true, true, local(restorePlan{source: sourceArchive}), nil},
		row{Local, true, true, false, local(restorePlan{source: sourceArchive, checkFirst: true, truncate: true}), nil},
		row{Local, true, true, true, local(restorePlan{source: sourceArchive, checkFirst: true, truncate: true}), nil},
		// The repository: chunks checked on failure; names listed first
		// when the directory is emptied; a bare stream is a plain tar.
		row{Local, false, false, false, local(restorePlan{source: sourceRepoGzip, checkChunks: true}), nil},
		row{Local, false, false, true, local(restorePlan{source: sourceRepoBare, plain: true, checkChunks: true}), nil},
		row{Local, true, false, false, local(restorePlan{source: sourceRepoGzip, listNames: true, truncate: true, checkChunks: true}), nil},
		row{Local, true, false, true, local(restorePlan{source: sourceRepoBare, plain: true, listNames: true, truncate: true, checkChunks: true}), nil},
	)
	if len(rows) != 32 {
		t.Fatalf("%d rows: every combination of the four facts is in the table once per adapter", len(rows))
	}
	for _, r := range rows {
		name := fmt.Sprintf("%q truncate=%v localFile=%v bare=%v", r.adapter, r.truncate, r.localFile, r.bare)
		got, err := planRestore(restoreInputs{adapter: r.adapter, truncate: r.truncate, localFile: r.localFile, bare: r.bare})
		if !errors.Is(err, r.err) || (r.err == nil) != (err == nil) {
			t.Errorf("%s: error %v, want %v", name, err, r.err)
		}
		if got != r.want {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, r.want)
		}
	}
}
