package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/atomicfile"
	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/ids"
)

const backupsUsage = "usage: wharf backups export [--config PATH] --to DIR BACKUP_UUID...\n" +
	"       wharf backups verify [--config PATH] [BACKUP_UUID...]\n"

// runBackups is `wharf backups`: offline tools for the node's local
// backups, safe to run while the daemon runs (they only read its backups).
func runBackups(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, backupsUsage)
		return errors.New("wharf backups: a subcommand is required")
	}
	switch args[0] {
	case "export":
		return runBackupsExport(args[1:])
	case "verify":
		return runBackupsVerify(args[1:])
	}
	fmt.Fprint(os.Stderr, backupsUsage)
	return fmt.Errorf("wharf backups: unknown subcommand %q", args[0])
}

// runBackupsExport writes each backup as DIR/<uuid>.tar.gz, the archive
// Wings restores: generated from the repository, or copied when the backup
// is already an archive.
func runBackupsExport(args []string) error {
	fs := flag.NewFlagSet("wharf backups export", flag.ContinueOnError)
	cfgPath := fs.String("config", config.DefaultPath, "path of the configuration file")
	to := fs.String("to", "", "directory to write <uuid>.tar.gz into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *to == "" || fs.NArg() == 0 {
		fmt.Fprint(os.Stderr, backupsUsage)
		return errors.New("wharf backups export: --to and at least one backup UUID are required")
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*to, 0o700); err != nil {
		return err
	}
	// No repository on a node that never used one is fine (archives only);
	// a bucket that does not answer is not.
	st, err := backup.OpenRepositoryReadOnly(cfg)
	if err != nil && cfg.System.Backups.Repository.S3.Enabled() {
		return err
	}
	for _, id := range fs.Args() {
		if !ids.IsUUID(id) {
			return fmt.Errorf("%q is not a backup UUID", id)
		}
		dst := filepath.Join(*to, id+".tar.gz")
		if err := exportOne(cfg, st, id, dst); err != nil {
			return fmt.Errorf("backup %s: %w", id, err)
		}
		fmt.Println(dst)
	}
	return nil
}

func exportOne(cfg *config.Config, st *chunkstore.Store, id, dst string) error {
	if st != nil {
		m, err := st.Find(id)
		if err == nil {
			return atomicfile.Write(dst, 0o600, func(w io.Writer) error {
				level := archive.ParseLevel(cfg.System.Backups.CompressionLevel)
				return backup.WriteRepositoryArchive(context.Background(), w, st, m, level, cfg.System.TmpDirectory)
			})
		}
		if !errors.Is(err, chunkstore.ErrNotFound) {
			return err
		}
	}
	// An archive backup, in the flat or the per-server layout.
	dir := cfg.System.BackupDirectory
	cands := []string{filepath.Join(dir, id+".tar.gz")}
	more, _ := filepath.Glob(filepath.Join(dir, "*", id+".tar.gz"))
	for _, p := range append(cands, more...) {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			return atomicfile.Write(dst, 0o600, func(w io.Writer) error {
				_, err := io.Copy(w, src)
				return err
			})
		}
	}
	return errors.New("not found in the repository nor in the backup directory")
}

// runBackupsVerify reads every chunk of the given backups (all when none
// is given) and reports damaged ones with the files they affect.
func runBackupsVerify(args []string) error {
	fs := flag.NewFlagSet("wharf backups verify", flag.ContinueOnError)
	cfgPath := fs.String("config", config.DefaultPath, "path of the configuration file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	st, err := backup.OpenRepositoryReadOnly(cfg)
	if err != nil {
		return err
	}
	var ms []chunkstore.Manifest
	if fs.NArg() == 0 {
		if ms, err = st.List(); err != nil {
			return err
		}
	}
	for _, id := range fs.Args() {
		m, err := st.Find(id)
		if err != nil {
			return fmt.Errorf("backup %s: %w", id, err)
		}
		ms = append(ms, m)
	}
	bad := 0
	for _, m := range ms {
		d := st.Check(m)
		if d == nil && m.Version >= 2 && chunkstore.ChunkListSHA1(m.Chunks) != m.SHA1 {
			bad++
			fmt.Printf("DAMAGED  %s (server %s): its checksum does not match its chunk list\n", m.Backup, m.Server)
			continue
		}
		if d == nil {
			fmt.Printf("ok       %s (server %s, %d bytes)\n", m.Backup, m.Server, m.Size)
			continue
		}
		bad++
		fmt.Printf("DAMAGED  %s (server %s): %d damaged chunks\n", m.Backup, m.Server, len(d.Chunks))
		for _, c := range d.Chunks {
			fmt.Printf("  %v\n", c)
		}
		for _, f := range d.Files {
			fmt.Printf("  affected file: %s\n", f)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d backups are damaged", bad, len(ms))
	}
	fmt.Printf("%d backups verified\n", len(ms))
	return nil
}
