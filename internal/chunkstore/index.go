package chunkstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// An index object ("index/<id>") names packs and their blobs, so that
// opening the repository reads a few objects instead of every pack's
// trailer:
//
//	"WHIDX001" | pack count (4) | per pack: id (16) | entry count (4) | entries (as in the pack)
//	| SHA-256 of everything before (32)
//
// A backup writes one naming the packs it wrote, after them and before
// its manifest; a GC writes one naming every pack it kept, then deletes
// the ones it read.

const indexMagic = "WHIDX001"

type indexedPack struct {
	ID      string // 32 hex
	Entries []packEntry
}

func encodeIndex(packs []indexedPack) []byte {
	b := append([]byte(nil), indexMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(packs)))
	for _, p := range packs {
		id, _ := hex.DecodeString(p.ID)
		b = append(b, id...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(p.Entries)))
		for _, e := range p.Entries {
			b = putEntry(b, e)
		}
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// parseIndex checks and decodes an index object.
func parseIndex(b []byte) ([]indexedPack, error) {
	if len(b) < len(indexMagic)+4+32 || string(b[:len(indexMagic)]) != indexMagic {
		return nil, errors.New("not an index object")
	}
	body := b[:len(b)-32]
	if sha256.Sum256(body) != blobID(b[len(b)-32:]) {
		return nil, errors.New("index object damaged (checksum)")
	}
	rest := body[len(indexMagic):]
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) > uint64(len(rest))/(16+4) {
		return nil, fmt.Errorf("index object claims %d packs", n)
	}
	out := make([]indexedPack, 0, n)
	for range n {
		if len(rest) < 16+4 {
			return nil, errors.New("index object truncated")
		}
		p := indexedPack{ID: hex.EncodeToString(rest[:16])}
		c := binary.BigEndian.Uint32(rest[16:])
		rest = rest[20:]
		if uint64(c) > uint64(len(rest))/packEntryLen {
			return nil, fmt.Errorf("index object: pack %s claims %d blobs", p.ID, c)
		}
		p.Entries = make([]packEntry, c)
		for i := range p.Entries {
			e := getEntry(rest)
			if e.Len == 0 || uint64(e.Off)+uint64(e.Len) > maxPackSize || e.Plain > maxChunk {
				return nil, fmt.Errorf("index object: pack %s: entry %d out of bounds", p.ID, i)
			}
			p.Entries[i] = e
			rest = rest[packEntryLen:]
		}
		out = append(out, p)
	}
	if len(rest) != 0 {
		return nil, errors.New("index object: trailing bytes")
	}
	return out, nil
}
