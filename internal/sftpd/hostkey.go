package sftpd

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/atomicfile"
)

// HostKeyPath is where the host key lives: <system.data>/.sftp/id_ed25519,
// the place and format (ED25519, PKCS#8 PEM, 0600) Wings uses, so a node
// switched from Wings keeps the key its users' clients already trust.
func HostKeyPath(dataDir string) string {
	return filepath.Join(dataDir, ".sftp", "id_ed25519")
}

// loadOrCreateHostKey reads the host key, generating it (atomically, so a
// crash never leaves half a key) on first use.
func loadOrCreateHostKey(path string) (ssh.Signer, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		data, err = newHostKey()
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("sftp host key: %w", err)
		}
		if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("sftp host key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("sftp host key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("sftp host key %s: %w", path, err)
	}
	return signer, nil
}

func newHostKey() ([]byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sftp host key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("sftp host key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
