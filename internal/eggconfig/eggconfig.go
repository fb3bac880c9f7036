// Package eggconfig rewrites a server's game configuration files before each start, as the panel's
// process_configuration.configs asks ("egg configs"): one rewriter per parser (properties,
// yaml/yml, json, ini, xml, toml, file), all going through the server's confined filesystem and
// writing each file atomically.
//
// Values taken from the node configuration are limited to the docker interface address
// ({{config.docker.network.interface}} and the legacy {{config.docker.interface}}); every other
// {{config.*}} placeholder is left exactly as written, so no node secret can be copied into a file
// the server owner can read.
package eggconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"strings"
)

// MaxFileSize is the largest configuration file that is read and rewritten (64 MiB).
const MaxFileSize int64 = 64 << 20

// FilePerm is the mode given to the files written (created or rewritten).
const FilePerm fs.FileMode = 0o644

// DirPerm is the mode given to the missing parent directories of a file that is created (as
// Wings does: an entry "plugins/Example/config.yml" creates plugins/ and plugins/Example/).
const DirPerm fs.FileMode = 0o755

// FS is the confined filesystem of one server. Names are relative to the server root.
type FS interface {
	// ReadFile returns the file's content; an error satisfying errors.Is(err, fs.ErrNotExist)
	// when it is missing; it must refuse (error) files larger than limit bytes without reading
	// them whole.
	ReadFile(name string, limit int64) ([]byte, error)
	// WriteFileAtomic writes via a temporary file + fsync + rename into an existing directory;
	// a crash mid-write leaves the old file.
	WriteFileAtomic(name string, r io.Reader, perm fs.FileMode) error
	// MkdirAll creates name and its missing parents with mode perm, owned as every other file
	// of the server, and refuses (error) to create anything through a symbolic link that leads
	// out of the root. Existing directories are accepted.
	MkdirAll(name string, perm fs.FileMode) error
}

// Vars holds the only node configuration values that may be substituted into files.
type Vars struct {
	// DockerInterface is the address of the docker network interface
	// ({{config.docker.network.interface}}).
	DockerInterface string
}

// Errors returned (wrapped in a *FileError) by Apply.
var (
	// ErrUnknownParser: the file's parser is none of the supported ones.
	ErrUnknownParser = errors.New("eggconfig: unknown parser")
	// ErrNoFileName: the configuration entry has an empty file name.
	ErrNoFileName = errors.New("eggconfig: configuration file without a name")
	// ErrFileTooLarge: the file is larger than MaxFileSize.
	ErrFileTooLarge = errors.New("eggconfig: file larger than 64 MiB")
	// ErrParse: the file's current content could not be parsed with its parser.
	ErrParse = errors.New("eggconfig: cannot parse file")
	// ErrRule: one replacement rule could not be applied (the others were).
	ErrRule = errors.New("eggconfig: replacement not applied")
)

// FileError is the error reported for one configuration file.
type FileError struct {
	File   string
	Parser string
	Err    error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("eggconfig: %s (parser %q): %v", e.File, e.Parser, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// RuleError is the error for one replacement rule of a file.
type RuleError struct {
	Match string
	Err   error
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("rule %q: %v", e.Match, e.Err)
}

func (e *RuleError) Unwrap() []error { return []error{ErrRule, e.Err} }

// rewriter rewrites the content of one file. It returns the new content, whether anything
// changed, and the errors of the rules that could not be applied. A parse error of the
// current content is returned as fatal (nothing is written).
type rewriter func(data []byte, rules []rule) (out []byte, changed bool, ruleErrs []error, fatal error)

var rewriters = map[string]rewriter{
	"properties": rewriteProperties,
	"yaml":       rewriteYAML,
	"yml":        rewriteYAML,
	"json":       rewriteJSON,
	"ini":        rewriteINI,
	"xml":        rewriteXML,
	"toml":       rewriteTOML,
	"file":       rewriteFile,
}

// Parsers lists the supported parser names.
func Parsers() []string {
	return []string{"file", "yaml", "yml", "properties", "ini", "json", "xml", "toml"}
}

// Apply rewrites every file; a failure in one file is logged (logger) and returned in the slice
// but never stops the others. Only a cancelled ctx stops the run early (its error is returned
// last). Files are processed in order, so two entries for one file see each other's result.
func Apply(ctx context.Context, fsys FS, files []File, vars Vars, logger *slog.Logger) []error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	for i := range files {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		f := &files[i]
		if f.decodeErr != nil {
			logger.Warn("egg config: replace list could not be decoded, file left as is",
				"file", f.File, "parser", f.Parser, "error", f.decodeErr)
		}
		if err := applyFile(fsys, f, vars, logger); err != nil {
			fe := &FileError{File: f.File, Parser: f.Parser, Err: err}
			logger.Error("egg config: file not rewritten", "file", f.File, "parser", f.Parser, "error", err)
			errs = append(errs, fe)
		}
	}
	return errs
}

func applyFile(fsys FS, f *File, vars Vars, logger *slog.Logger) error {
	if f.File == "" {
		return ErrNoFileName
	}
	rw, ok := rewriters[strings.ToLower(f.Parser)]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownParser, f.Parser)
	}
	rules, ruleErrs := prepareRules(f.Replace, vars)

	data, err := fsys.ReadFile(f.File, MaxFileSize)
	exists := true
	switch {
	case errors.Is(err, fs.ErrNotExist):
		exists, data = false, nil
	case err != nil:
		return fmt.Errorf("read: %w", err)
	case int64(len(data)) > MaxFileSize:
		return ErrFileTooLarge
	}

	out, changed, errs, fatal := runRewriter(rw, data, rules)
	ruleErrs = append(ruleErrs, errs...)
	for _, re := range ruleErrs {
		logger.Warn("egg config: replacement not applied", "file", f.File, "parser", f.Parser, "error", re)
	}
	if fatal != nil {
		return errors.Join(append([]error{fmt.Errorf("%w: %w", ErrParse, fatal)}, ruleErrs...)...)
	}
	if changed || !exists {
		if !exists {
			if dir := path.Dir(f.File); dir != "." && dir != "/" {
				if err := fsys.MkdirAll(dir, DirPerm); err != nil {
					return errors.Join(append([]error{fmt.Errorf("create parent directories: %w", err)}, ruleErrs...)...)
				}
			}
		}
		if err := fsys.WriteFileAtomic(f.File, bytes.NewReader(out), FilePerm); err != nil {
			return errors.Join(append([]error{fmt.Errorf("write: %w", err)}, ruleErrs...)...)
		}
	}
	return errors.Join(ruleErrs...)
}

// runRewriter calls rw, turning a panic (a parser library bug on some input) into an error for
// this file, so that it can never take the agent down in a server's start sequence.
func runRewriter(rw rewriter, data []byte, rules []rule) (out []byte, changed bool, errs []error, fatal error) {
	defer func() {
		if p := recover(); p != nil {
			out, changed, errs, fatal = nil, false, nil, fmt.Errorf("rewriter panic: %v", p)
		}
	}()
	return rw(data, rules)
}
