package wsapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// wsFrame builds one frame: masked with key when masked (a client's).
func wsFrame(b0 byte, payload []byte, masked bool, key [4]byte) []byte {
	var h []byte
	b1 := byte(0)
	if masked {
		b1 = wsMasked
	}
	switch n := len(payload); {
	case n <= 125:
		h = []byte{b0, b1 | byte(n)}
	case n <= 0xffff:
		h = []byte{b0, b1 | 126, 0, 0}
		binary.BigEndian.PutUint16(h[2:], uint16(n))
	default:
		h = []byte{b0, b1 | 127, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(h[2:], uint64(n))
	}
	if !masked {
		return append(h, payload...)
	}
	h = append(h, key[:]...)
	for i, c := range payload {
		h = append(h, c^key[i%4])
	}
	return h
}

// filterChunks runs the stream through a pongFilter in chunks of the given
// sizes (cycled) and returns what passed and the pongs' payloads.
func filterChunks(t testing.TB, stream []byte, sizes []int) ([]byte, [][]byte, error) {
	var f pongFilter
	var out []byte
	var pongs [][]byte
	for i := 0; len(stream) > 0; i++ {
		n := min(len(stream), max(1, sizes[i%len(sizes)]))
		chunk := bytes.Clone(stream[:n])
		stream = stream[n:]
		k, err := f.filter(chunk, func(p []byte) { pongs = append(pongs, bytes.Clone(p)) })
		out = append(out, chunk[:k]...)
		if err != nil {
			return out, pongs, err
		}
	}
	return out, pongs, nil
}

func TestPongFilterTakesOutPongsOnly(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	text := wsFrame(wsFin|0x1, []byte(`{"event":"send logs","args":[]}`), true, key)
	big := wsFrame(wsFin|0x1, bytes.Repeat([]byte("y"), 300), true, key)
	ping := wsFrame(wsFin|opPingWS, []byte("client ping"), true, key)
	frag1 := wsFrame(0x1, []byte("part one "), true, key)
	frag2 := wsFrame(wsFin, []byte("part two"), true, key)
	id := make([]byte, 8)
	binary.BigEndian.PutUint64(id, 42)
	pong := wsFrame(wsFin|opPongWS, id, true, [4]byte{9, 8, 7, 6})
	empty := wsFrame(wsFin|opPongWS, nil, true, key)

	var stream, want []byte
	for _, part := range [][]byte{text, pong, big, ping, frag1, pong, frag2, empty, text} {
		stream = append(stream, part...)
	}
	for _, part := range [][]byte{text, big, ping, frag1, frag2, text} {
		want = append(want, part...)
	}
	for _, sizes := range [][]int{{len(stream)}, {1}, {2, 3}, {7}, {13, 1, 64}} {
		out, pongs, err := filterChunks(t, stream, sizes)
		if err != nil {
			t.Fatalf("chunks %v: %v", sizes, err)
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("chunks %v: the frames that are not pongs changed", sizes)
		}
		if len(pongs) != 3 || !bytes.Equal(pongs[0], id) || !bytes.Equal(pongs[1], id) || len(pongs[2]) != 0 {
			t.Fatalf("chunks %v: pongs %q", sizes, pongs)
		}
	}
}

func TestPongFilterRefusesBadPongs(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	for name, f := range map[string][]byte{
		"unmasked":   wsFrame(wsFin|opPongWS, []byte("x"), false, key),
		"fragmented": wsFrame(opPongWS, []byte("x"), true, key),
		"rsv":        wsFrame(wsFin|0x40|opPongWS, []byte("x"), true, key),
		"too long":   wsFrame(wsFin|opPongWS, make([]byte, 126), true, key),
	} {
		_, _, err := filterChunks(t, f, []int{3})
		if !errors.Is(err, errBadPong) {
			t.Errorf("%s: %v, want errBadPong", name, err)
		}
	}
}

func TestFrameCursorBoundaries(t *testing.T) {
	var stream []byte
	var ends []int
	for _, n := range []int{0, 5, 125, 126, 300, 70000} {
		stream = append(stream, wsFrame(wsFin|0x1, bytes.Repeat([]byte("z"), n), false, [4]byte{})...)
		ends = append(ends, len(stream))
	}
	for _, size := range []int{1, 3, 64, 1000} {
		var c frameCursor
		at := map[int]bool{}
		for i := 0; i < len(stream); i += size {
			c.advance(stream[i:min(len(stream), i+size)])
			if c.atBoundary() {
				at[min(len(stream), i+size)] = true
			}
		}
		for _, e := range ends {
			if e%size == 0 || e == len(stream) {
				if !at[e] {
					t.Fatalf("chunks of %d: no boundary at %d", size, e)
				}
			}
		}
		for pos := range at {
			found := false
			for _, e := range ends {
				found = found || e == pos
			}
			if !found {
				t.Fatalf("chunks of %d: a boundary inside a frame at %d", size, pos)
			}
		}
	}
}

// FuzzPongFilter: whatever the client sends and however it is cut, the
// filter passes every byte of the frames that are not pongs, in order, and
// never panics.
func FuzzPongFilter(f *testing.F) {
	key := [4]byte{5, 6, 7, 8}
	f.Add(append(wsFrame(wsFin|0x1, []byte("hello"), true, key), wsFrame(wsFin|opPongWS, []byte("12345678"), true, key)...), uint8(3))
	f.Add(wsFrame(wsFin|0x2, make([]byte, 200), true, key), uint8(1))
	f.Add([]byte{0x8a, 0xff, 0, 0}, uint8(2))
	f.Fuzz(func(t *testing.T, stream []byte, size uint8) {
		whole, wp, werr := filterChunks(t, stream, []int{len(stream) + 1})
		cut, cp, cerr := filterChunks(t, stream, []int{int(size%17) + 1})
		if (werr == nil) != (cerr == nil) || !bytes.Equal(whole, cut) || len(wp) != len(cp) {
			t.Fatalf("cutting changed the result: %v/%v, %d/%d bytes, %d/%d pongs", werr, cerr, len(whole), len(cut), len(wp), len(cp))
		}
		if len(whole) > len(stream) {
			t.Fatal("the filter added bytes")
		}
	})
}
