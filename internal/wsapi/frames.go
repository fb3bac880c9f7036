package wsapi

import (
	"encoding/binary"
	"errors"
)

// The console's pacing (issue 38 §1) sends websocket pings of its own and
// reads their pongs below the websocket library: a ping is put between two
// of the library's frames on the way out (frameCursor finds the
// boundaries), and a pong is taken out of the client's bytes on the way in
// (pongFilter), so that neither needs a goroutine waiting in the library
// (Conn.Ping blocks until the reader meets the pong, and the reader would
// then stay deep in the library's Read until the client's next message).

// Websocket opcodes and header bits (RFC 6455 §5.2).
const (
	wsFin     = 0x80
	wsRSV     = 0x70
	wsOpcode  = 0x0f
	wsMasked  = 0x80
	wsLen7    = 0x7f
	opPingWS  = 0x9
	opPongWS  = 0xa
	pingIDLen = 8 // the payload of the daemon's pings: a big-endian counter
)

// pingFrame returns the daemon's ping frame with id as its payload (a
// server's frames are not masked).
func pingFrame(id uint64) [2 + pingIDLen]byte {
	var f [2 + pingIDLen]byte
	f[0] = wsFin | opPingWS
	f[1] = pingIDLen
	binary.BigEndian.PutUint64(f[2:], id)
	return f
}

// frameHeaderLen returns the length of the header that starts with b0, b1
// and the payload length's size, and whether the frame is masked.
func frameHeaderLen(b1 byte) (hdr int, masked bool) {
	hdr = 2
	switch b1 & wsLen7 {
	case 126:
		hdr += 2
	case 127:
		hdr += 8
	}
	if b1&wsMasked != 0 {
		hdr += 4
	}
	return hdr, b1&wsMasked != 0
}

// framePayloadLen reads the payload length of a whole header.
func framePayloadLen(h []byte) uint64 {
	switch n := h[1] & wsLen7; n {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		return binary.BigEndian.Uint64(h[2:10])
	default:
		return uint64(n)
	}
}

// frameCursor follows the frame boundaries of the bytes the websocket
// library writes (well-formed frames: the daemon's own), so that a ping
// can be put between two frames and never inside one.
type frameCursor struct {
	hdr  [14]byte
	hn   uint8  // header bytes gathered
	left uint64 // payload bytes of the current frame still to come
}

// atBoundary reports whether the next byte starts a frame.
func (c *frameCursor) atBoundary() bool { return c.hn == 0 && c.left == 0 }

// advance follows p, the next bytes of the stream.
func (c *frameCursor) advance(p []byte) {
	for len(p) > 0 {
		if c.hn == 0 && c.left > 0 {
			n := min(uint64(len(p)), c.left)
			c.left -= n
			p = p[n:]
			continue
		}
		c.hdr[c.hn] = p[0]
		c.hn++
		p = p[1:]
		if c.hn < 2 {
			continue
		}
		need, _ := frameHeaderLen(c.hdr[1])
		if int(c.hn) < need {
			continue
		}
		c.left = framePayloadLen(c.hdr[:c.hn])
		c.hn = 0
	}
}

// errBadPong: the client sent a pong that is not a valid control frame.
var errBadPong = errors.New("websocket: invalid pong frame from the client")

// pongFilter takes the pong frames out of a client's byte stream and
// reports their payloads; every other byte passes through unchanged, in
// order, to the websocket library. A pong that is not a valid control
// frame (fragmented, reserved bits, unmasked, longer than 125 bytes) is an
// error: the connection is not read further.
type pongFilter struct {
	hdr  [14]byte
	hn   uint8  // header bytes gathered
	need uint8  // the header's length once its second byte is known
	left uint64 // payload bytes of the current frame still to come
	pong bool   // the current frame is a pong: its bytes are removed
	pay  [pingIDLen]byte
	pn   uint8 // payload bytes gathered (up to pingIDLen)
	pos  uint8 // payload bytes seen (for the mask)
	bad  bool
}

// filter removes the pong frames from p in place and returns how many
// bytes remain; onPong gets each whole pong's payload (its first
// pingIDLen bytes, unmasked).
func (f *pongFilter) filter(p []byte, onPong func(payload []byte)) (int, error) {
	if f.bad {
		return 0, errBadPong
	}
	w := 0
	for r := 0; r < len(p); {
		if f.hn == 0 && f.left > 0 { // payload
			n := int(min(uint64(len(p)-r), f.left))
			if f.pong {
				f.gather(p[r : r+n])
			} else {
				copy(p[w:], p[r:r+n])
				w += n
			}
			r += n
			f.left -= uint64(n)
			if f.left == 0 && f.pong {
				f.endPong(onPong)
			}
			continue
		}
		b := p[r]
		r++
		if f.hn == 0 {
			f.pong = b&wsOpcode == opPongWS
			if f.pong && (b&wsFin == 0 || b&wsRSV != 0) {
				f.bad = true
				return w, errBadPong
			}
		}
		f.hdr[f.hn] = b
		f.hn++
		if !f.pong {
			p[w] = b
			w++
		}
		if f.hn == 2 {
			need, masked := frameHeaderLen(b)
			if f.pong && (!masked || b&wsLen7 > 125) {
				f.bad = true
				return w, errBadPong
			}
			f.need = uint8(need)
		}
		if f.hn < 2 || f.hn < f.need {
			continue
		}
		f.left = framePayloadLen(f.hdr[:f.hn])
		f.hn, f.need, f.pn, f.pos = 0, 0, 0, 0
		if f.left == 0 && f.pong {
			f.endPong(onPong)
		}
	}
	return w, nil
}

// gather keeps the first pingIDLen bytes of a pong's payload, unmasked.
func (f *pongFilter) gather(b []byte) {
	key := f.hdr[2:6] // a pong's length fits in the first byte: the key follows
	for _, c := range b {
		if f.pn < pingIDLen {
			f.pay[f.pn] = c ^ key[f.pos%4]
			f.pn++
		}
		f.pos++
	}
}

func (f *pongFilter) endPong(onPong func([]byte)) {
	if onPong != nil {
		onPong(f.pay[:f.pn])
	}
	f.pong, f.pn, f.pos = false, 0, 0
}
