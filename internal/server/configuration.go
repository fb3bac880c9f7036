package server

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/wharf/wharf/internal/ids"
	"github.com/wharf/wharf/internal/panel"
)

// Configuration is a server's settings as the backend sends them. Field order
// and keys follow what the panels expect back from GET /api/servers/:server.
type Configuration struct {
	UUID string `json:"uuid"`
	Meta struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	} `json:"meta"`
	Suspended             bool              `json:"suspended"`
	Invocation            string            `json:"invocation"`
	SkipEggScripts        bool              `json:"skip_egg_scripts"`
	Environment           map[string]any    `json:"environment"`
	Labels                map[string]string `json:"labels"`
	Allocations           Allocations       `json:"allocations"`
	Build                 Build             `json:"build"`
	CrashDetectionEnabled bool              `json:"crash_detection_enabled"`
	Mounts                []Mount           `json:"mounts"`
	Egg                   Egg               `json:"egg"`
	Container             Container         `json:"container"`
}

// Allocations are the server's ports.
type Allocations struct {
	ForceOutgoingIP bool `json:"force_outgoing_ip"`
	Default         struct {
		IP   string `json:"ip"`
		Port int    `json:"port"`
	} `json:"default"`
	Mappings map[string][]int `json:"mappings"`
}

// Build holds the resource limits.
type Build struct {
	MemoryLimit int64  `json:"memory_limit"` // MB
	Swap        int64  `json:"swap"`         // MB, -1 unlimited
	IOWeight    uint16 `json:"io_weight"`
	CPULimit    int64  `json:"cpu_limit"`  // percent of one core
	DiskSpace   int64  `json:"disk_space"` // MiB, 0 unlimited, -1 no writes
	Threads     string `json:"threads"`
	OOMDisabled bool   `json:"oom_disabled"`         // Pterodactyl's name
	OOMKiller   *bool  `json:"oom_killer,omitempty"` // Pelican's name, and its opposite
}

// OOMKillDisabled reports whether the kernel's OOM killer is off for the
// container. Pelican sends oom_killer (environment/settings.go in Pelican
// Wings: OomKillDisable = !OOMKiller), Pterodactyl oom_disabled; when a
// configuration carries both, Pelican's wins.
func (b Build) OOMKillDisabled() bool {
	if b.OOMKiller != nil {
		return !*b.OOMKiller
	}
	return b.OOMDisabled
}

// DiskLimitBytes converts disk_space to bytes, keeping 0 (unlimited) and -1 (no writes).
func (b Build) DiskLimitBytes() int64 {
	if b.DiskSpace <= 0 {
		return b.DiskSpace
	}
	return b.DiskSpace * 1024 * 1024
}

// Mount is an extra bind mount requested by the backend.
type Mount struct {
	Target   string `json:"target"`
	Source   string `json:"source"`
	ReadOnly bool   `json:"read_only"`
}

// Egg holds egg-level settings.
type Egg struct {
	ID           string   `json:"id"`
	FileDenylist []string `json:"file_denylist"`
	Features     Features `json:"features,omitempty"`
}

// Features maps a Pelican egg feature (eula, java_version, ...) to the
// console strings that reveal it is needed; see FeatureMatcher.
type Features map[string][]string

// UnmarshalJSON reads the object Pelican sends. Its panel encodes an egg
// without features as [] (an empty PHP array), and Pelican Wings
// (server/configuration.go) drops features it cannot read rather than the
// whole configuration: so do we.
func (f *Features) UnmarshalJSON(b []byte) error {
	var m map[string][]string
	if err := json.Unmarshal(b, &m); err != nil {
		m = nil
	}
	*f = m
	return nil
}

// Container holds the image.
type Container struct {
	Image string `json:"image"`
}

// ProcessConfiguration tells how to detect startup, stop the process and which
// configuration files to rewrite before a start.
type ProcessConfiguration struct {
	Startup struct {
		Done            []string `json:"done"`
		UserInteraction []string `json:"user_interaction"`
		StripANSI       bool     `json:"strip_ansi"`
	} `json:"startup"`
	Stop struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	} `json:"stop"`
	Configs json.RawMessage `json:"configs"`
}

// Definition is everything the backend says about one server.
type Definition struct {
	Config  Configuration
	Process ProcessConfiguration
}

// ParseDefinition decodes a server's settings and process configuration.
// crashDetectionDefault seeds crash_detection_enabled, which panels may omit.
func ParseDefinition(settings, process json.RawMessage, crashDetectionDefault bool) (Definition, error) {
	var d Definition
	d.Config.CrashDetectionEnabled = crashDetectionDefault
	if len(settings) == 0 {
		return d, fmt.Errorf("server: configuration has no settings")
	}
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.UseNumber() // environment values keep their exact text (25565, not 25565.000000)
	if err := dec.Decode(&d.Config); err != nil {
		return d, fmt.Errorf("server: invalid settings: %w", err)
	}
	if !ids.IsUUID(d.Config.UUID) {
		return d, fmt.Errorf("server: settings carry an invalid uuid %q", d.Config.UUID)
	}
	if len(process) > 0 && string(process) != "null" {
		if err := json.Unmarshal(process, &d.Process); err != nil {
			return d, fmt.Errorf("server %s: invalid process configuration: %w", d.Config.UUID, err)
		}
	}
	return d, nil
}

// DefinitionFromPanel decodes a configuration answer of the backend.
func DefinitionFromPanel(c panel.ServerConfiguration, crashDetectionDefault bool) (Definition, error) {
	return ParseDefinition(c.Settings, c.ProcessConfiguration, crashDetectionDefault)
}
