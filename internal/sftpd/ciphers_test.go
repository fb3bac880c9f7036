package sftpd

import (
	"slices"
	"testing"

	"golang.org/x/crypto/ssh"
)

// The cipher lists (issue 38 §1b): without AES instructions ChaCha20 stays
// offered; with them it is left out and AES-GCM and AES-CTR remain. Every
// name is one x/crypto/ssh implements (a typo would silently drop it).
func TestCipherLists(t *testing.T) {
	supported := map[string]bool{}
	for _, c := range ssh.SupportedAlgorithms().Ciphers {
		supported[c] = true
	}
	for _, aesni := range []bool{false, true} {
		list := ciphers(aesni)
		for _, c := range list {
			if !supported[c] {
				t.Errorf("ciphers(%v): %q is not a supported cipher", aesni, c)
			}
		}
		if got := slices.Contains(list, ssh.CipherChaCha20Poly1305); got == aesni {
			t.Errorf("ciphers(%v) offers ChaCha20-Poly1305: %v", aesni, got)
		}
		for _, c := range []string{ssh.CipherAES128GCM, ssh.CipherAES128CTR} {
			if !slices.Contains(list, c) {
				t.Errorf("ciphers(%v) lacks %s", aesni, c)
			}
		}
	}
}
