package sftpd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// chunkyChannel stands for an SSH channel: each Read returns what has
// arrived so far and fits (a random amount up to max), and counts the
// Reads that returned data (x/crypto/ssh may send a window adjustment
// after each).
type chunkyChannel struct {
	src   *bytes.Reader
	rnd   *rand.Rand
	max   int
	reads int
	err   error // returned with the last bytes, then alone
}

func (c *chunkyChannel) Read(p []byte) (int, error) {
	if c.src.Len() == 0 {
		return 0, cmpErr(c.err)
	}
	// The channel's buffer holds what arrived: a Read takes what fits.
	k := min(len(p), 1+c.rnd.IntN(c.max))
	n, _ := c.src.Read(p[:k])
	c.reads++
	if c.src.Len() == 0 && c.err != nil {
		return n, c.err
	}
	return n, nil
}

func cmpErr(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

func (c *chunkyChannel) Write(p []byte) (int, error) { return len(p), nil }
func (c *chunkyChannel) Close() error                { return nil }

// packets makes n SFTP-like packets (uint32 length, body) of 32 KiB and a
// few bytes, as uploads send them.
func packets(rnd *rand.Rand, n int) ([]byte, [][]byte) {
	var all bytes.Buffer
	var bodies [][]byte
	for range n {
		body := make([]byte, 32<<10+rnd.IntN(64))
		for i := range body {
			body[i] = byte(rnd.Uint32())
		}
		_ = binary.Write(&all, binary.BigEndian, uint32(len(body)))
		all.Write(body)
		bodies = append(bodies, body)
	}
	return all.Bytes(), bodies
}

// readPackets reads as pkg/sftp's recvPacket does: the length, then the
// body, each with io.ReadFull.
func readPackets(t *testing.T, r io.Reader, want [][]byte) {
	t.Helper()
	for i, body := range want {
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			t.Fatalf("packet %d: length: %v", i, err)
		}
		got := make([]byte, binary.BigEndian.Uint32(l[:]))
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatalf("packet %d: body: %v", i, err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("packet %d differs", i)
		}
	}
}

// An upload's packets come through the buffer byte for byte, in at most
// half the channel Reads (window adjustments) of unbuffered reading (the
// control: pkg/sftp's two Reads a packet at least), and the buffer is back
// in the pool at the end.
func TestBufferedChannelFewerReads(t *testing.T) {
	const n = 200
	rnd := rand.New(rand.NewPCG(1, 2))
	data, bodies := packets(rnd, n)
	// The client sends ahead (OpenSSH keeps 64 requests in flight): the
	// channel has up to 256 KiB there when it is read.
	plain := &chunkyChannel{src: bytes.NewReader(data), rnd: rand.New(rand.NewPCG(3, 4)), max: 256 << 10}
	readPackets(t, plain, bodies)

	ch := &chunkyChannel{src: bytes.NewReader(data), rnd: rand.New(rand.NewPCG(3, 4)), max: 256 << 10}
	pool := newReadBufPool()
	bc := newBufferedChannel(ch, pool)
	readPackets(t, bc, bodies)
	if _, err := bc.Read(make([]byte, 4)); err != io.EOF {
		t.Fatalf("after the last packet: %v, want EOF", err)
	}
	if plain.reads < 2*n {
		t.Fatalf("control: unbuffered reading took %d channel reads for %d packets, want at least %d", plain.reads, n, 2*n)
	}
	if ch.reads > plain.reads/2 {
		t.Fatalf("buffered reading took %d channel reads for %d packets, unbuffered %d: want at most half", ch.reads, n, plain.reads)
	}
	if bc.buf != nil {
		t.Fatal("the buffer is still held after the stream was drained")
	}
}

// blockingChannel's Read records the size asked for, then waits.
type blockingChannel struct {
	asked   chan int
	release chan struct{}
}

func (c *blockingChannel) Read(p []byte) (int, error) {
	c.asked <- len(p)
	<-c.release
	return 0, io.EOF
}
func (c *blockingChannel) Write(p []byte) (int, error) { return len(p), nil }
func (c *blockingChannel) Close() error                { return nil }

// A session waiting for its next request (a Read of a packet's length on
// an empty buffer) holds no buffer: the wait reads into the caller's 4
// bytes.
func TestBufferedChannelIdleHoldsNoBuffer(t *testing.T) {
	ch := &blockingChannel{asked: make(chan int, 1), release: make(chan struct{})}
	bc := newBufferedChannel(ch, newReadBufPool())
	done := make(chan error, 1)
	go func() {
		_, err := bc.Read(make([]byte, 4))
		done <- err
	}()
	if got := <-ch.asked; got != 4 {
		t.Fatalf("an idle Read of 4 bytes asked the channel for %d (a pooled buffer held while idle)", got)
	}
	close(ch.release)
	if err := <-done; err != io.EOF {
		t.Fatalf("Read: %v, want EOF", err)
	}
	if bc.buf != nil {
		t.Fatal("a buffer is held after an idle Read")
	}
}

// An error that comes with the last bytes is returned once they are read;
// data is never lost or reordered around it.
func TestBufferedChannelErrorAfterData(t *testing.T) {
	boom := errors.New("boom")
	ch := &chunkyChannel{src: bytes.NewReader([]byte("0123456789abcdef")), rnd: rand.New(rand.NewPCG(5, 6)), max: 64 << 10, err: boom}
	bc := newBufferedChannel(ch, newReadBufPool())
	got := make([]byte, 0, 16)
	p := make([]byte, 1000) // buffered: between smallRead and readBufSize
	for {
		n, err := bc.Read(p)
		got = append(got, p[:n]...)
		if err != nil {
			if !errors.Is(err, boom) {
				t.Fatalf("error %v, want boom", err)
			}
			break
		}
	}
	if string(got) != "0123456789abcdef" {
		t.Fatalf("read %q", got)
	}
}
