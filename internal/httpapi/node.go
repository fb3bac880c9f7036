package httpapi

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/diagnostics"
	"github.com/wharf/wharf/internal/hostinfo"
	wruntime "github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/usererr"
)

// The node endpoints of Pelican's panel (pelican-dev/wings router/router.go,
// router/router_system.go) and the v2 shape of GET /api/system.

var errNoPrune = usererr.New(usererr.NotFound, "The container runtime of this node cannot prune images.")

// The host's figures come from internal/hostinfo. The JSON names and units
// (bytes, percent of all CPUs) are Pelican Wings' (system/system.go,
// Utilization).

type diskInfo struct {
	Device     string   `json:"device"`
	Mountpoint string   `json:"mountpoint"`
	TotalSpace uint64   `json:"total_space"`
	UsedSpace  uint64   `json:"used_space"`
	Tags       []string `json:"tags"`
}

type utilization struct {
	MemoryTotal uint64     `json:"memory_total"`
	MemoryUsed  uint64     `json:"memory_used"`
	SwapTotal   uint64     `json:"swap_total"`
	SwapUsed    uint64     `json:"swap_used"`
	LoadAvg1    float64    `json:"load_average1"`
	LoadAvg5    float64    `json:"load_average5"`
	LoadAvg15   float64    `json:"load_average15"`
	CPUPercent  float64    `json:"cpu_percent"`
	DiskTotal   uint64     `json:"disk_total"`
	DiskUsed    uint64     `json:"disk_used"`
	DiskDetails []diskInfo `json:"disk_details"`
}

// systemInfoV2 is GET /api/system?v=2, Wings' system.Information (the same
// in Pterodactyl and Pelican Wings; Pterodactyl's TelemetryCollectionService
// reads docker.version, docker.containers, system.cpu_threads,
// system.memory_bytes, system.os...).
type systemInfoV2 struct {
	Version string       `json:"version"`
	Docker  dockerInfoV2 `json:"docker"`
	System  systemV2     `json:"system"`
}

type dockerInfoV2 struct {
	Version string `json:"version"`
	Cgroups struct {
		Driver  string `json:"driver"`
		Version string `json:"version"`
	} `json:"cgroups"`
	Containers struct {
		Total   int `json:"total"`
		Running int `json:"running"`
		Paused  int `json:"paused"`
		Stopped int `json:"stopped"`
	} `json:"containers"`
	Storage struct {
		Driver     string `json:"driver"`
		Filesystem string `json:"filesystem"`
	} `json:"storage"`
	Runc struct {
		Version string `json:"version"`
	} `json:"runc"`
}

type systemV2 struct {
	Architecture  string `json:"architecture"`
	CPUThreads    int    `json:"cpu_threads"`
	MemoryBytes   int64  `json:"memory_bytes"`
	KernelVersion string `json:"kernel_version"`
	OS            string `json:"os"`
	OSType        string `json:"os_type"`
}

// getSystemV2 answers GET /api/system?v=2. An engine that does not answer
// leaves the docker part empty: the node's health is not the engine's.
func (a *API) getSystemV2(w http.ResponseWriter, r *http.Request) error {
	out := systemInfoV2{Version: a.Version, System: systemV2{
		Architecture: runtime.GOARCH, CPUThreads: runtime.NumCPU(),
		KernelVersion: hostinfo.KernelRelease(), OS: hostinfo.OSPrettyName(a.hostPaths().OSRelease), OSType: runtime.GOOS,
	}}
	if mem, _, _, _, err := hostinfo.Meminfo(a.hostPaths().Meminfo); err == nil {
		out.System.MemoryBytes = int64(mem)
	}
	if e, ok := a.Runtime.(wruntime.EngineDescriber); ok {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if info, err := e.EngineInfo(ctx); err != nil {
			a.Log.Warn("GET /api/system?v=2: the container engine does not answer", "error", err)
		} else {
			d := &out.Docker
			d.Version = info.Version
			d.Cgroups.Driver, d.Cgroups.Version = info.CgroupDriver, info.CgroupVersion
			d.Containers.Total, d.Containers.Running = info.Containers, info.Running
			d.Containers.Paused, d.Containers.Stopped = info.Paused, info.Stopped
			d.Storage.Driver, d.Storage.Filesystem = info.StorageDriver, info.BackingFilesystem
			d.Runc.Version = info.RuncVersion
			if info.MemoryBytes > 0 {
				out.System.MemoryBytes = info.MemoryBytes
			}
			if out.System.OS == "" {
				out.System.OS = info.OperatingSystem
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) hostPaths() hostinfo.Paths {
	if a.paths != nil {
		return *a.paths
	}
	return hostinfo.Proc()
}

// getUtilization is GET /api/system/utilization (Pelican's node dashboard,
// app/Models/Node.php statistics(): it shows zeros unless memory_total is
// set). Disk figures are those of the filesystem of root_directory;
// disk_details lists the filesystem of each configured directory.
func (a *API) getUtilization(w http.ResponseWriter, r *http.Request) error {
	p := a.hostPaths()
	var u utilization
	var err error
	if u.MemoryTotal, u.MemoryUsed, u.SwapTotal, u.SwapUsed, err = hostinfo.Meminfo(p.Meminfo); err != nil {
		return err
	}
	if u.LoadAvg1, u.LoadAvg5, u.LoadAvg15, err = hostinfo.Loadavg(p.Loadavg); err != nil {
		return err
	}
	if u.CPUPercent, err = a.cpu.Percent(r.Context()); err != nil {
		return err
	}
	c := a.Config.Get()
	u.DiskDetails = []diskInfo{}
	for _, d := range hostinfo.Disks([]hostinfo.TaggedDir{
		{Tag: "Root", Path: c.System.RootDirectory}, {Tag: "Logs", Path: c.System.LogDirectory}, {Tag: "Data", Path: c.System.Data},
		{Tag: "Archive", Path: c.System.ArchiveDirectory}, {Tag: "Backup", Path: c.System.BackupDirectory}, {Tag: "Temp", Path: c.System.TmpDirectory},
	}, p.Mounts) {
		u.DiskDetails = append(u.DiskDetails, diskInfo(d))
	}
	for _, d := range u.DiskDetails {
		if d.Tags[0] == "Root" {
			u.DiskTotal, u.DiskUsed = d.TotalSpace, d.UsedSpace
		}
	}
	writeJSON(w, http.StatusOK, u)
	return nil
}

type ipAddresses struct {
	IPAddresses []string `json:"ip_addresses"`
}

// getIPs is GET /api/system/ips (Pelican's allocation wizard,
// Node::ipAddresses()).
func (a *API) getIPs(w http.ResponseWriter, r *http.Request) error {
	ips, err := hostinfo.IPs()
	if err != nil {
		return err
	}
	// docker.system_ips: failover and NAT addresses, after the interfaces'.
	for _, ip := range a.Config.Get().Docker.SystemIPs {
		if !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	writeJSON(w, http.StatusOK, ipAddresses{IPAddresses: ips})
	return nil
}

// Pelican Wings' bounds of log_lines (router/router_system.go getDiagnostics).
const (
	defaultDiagLogLines = 200
	maxDiagLogLines     = 500
)

// getDiagnostics is GET /api/diagnostics: the `wharf diagnostics` report
// as text/plain (Pelican's node diagnostics tab, EditNode.php). include_logs
// (default true), log_lines (default 200, at most 500) and include_endpoints
// (default false: the panel offers the report for a public paste site) as
// Pelican Wings (router/router_system.go getDiagnostics). The log lines are
// the daemon's own most recent ones, whatever started it.
func (a *API) getDiagnostics(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	hide := !strings.EqualFold(q.Get("include_endpoints"), "true")
	lines := defaultDiagLogLines
	if n, err := strconv.Atoi(q.Get("log_lines")); err == nil && n > 0 {
		lines = min(n, maxDiagLogLines)
	}
	if strings.EqualFold(q.Get("include_logs"), "false") {
		lines = 0
	}
	// The panel waits 5 s (DaemonSystemRepository::getDiagnostics).
	ctx, cancel := context.WithTimeout(r.Context(), 4*time.Second)
	defer cancel()
	var b strings.Builder
	if err := diagnostics.Write(ctx, &b, diagnostics.Options{
		ConfigPath: a.ConfigPath, Version: a.Version, Commit: a.Commit, LogLines: lines,
		HideEndpoints: hide, Logs: a.recentLogs(), TokenScopes: a.tokenScopes(), Runtime: a.Runtime,
	}); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(b.String()))
	return nil
}

// recentLogs is the diagnostics' log source: the daemon's own lines when it
// keeps them, else (nil) the journal.
func (a *API) recentLogs() func(context.Context, int) ([]string, error) {
	if a.RecentLogs == nil {
		return nil
	}
	return func(_ context.Context, n int) ([]string, error) { return a.RecentLogs(n), nil }
}

// tokenScopes counts the scoped tokens seen, for the diagnostics' suggestion.
func (a *API) tokenScopes() func() (int64, int64) {
	if a.Tokens == nil {
		return nil
	}
	return a.Tokens.ScopesSeen
}

// pruneReport is Docker's image prune report, which Pelican Wings passes on
// as it is (system.PruneDockerImages) and the panel's PruneImagesCommand
// reads: ImagesDeleted is null when nothing was removed.
type pruneReport struct {
	ImagesDeleted  []deletedImage `json:"ImagesDeleted"`
	SpaceReclaimed uint64         `json:"SpaceReclaimed"`
}

type deletedImage struct {
	Untagged string `json:"Untagged,omitempty"`
	Deleted  string `json:"Deleted,omitempty"`
}

// deletePruneImages is DELETE /api/system/docker/image/prune: the engine's
// dangling images are removed; an image any container uses is kept.
func (a *API) deletePruneImages(w http.ResponseWriter, r *http.Request) error {
	p, ok := a.Runtime.(wruntime.ImagePruner)
	if !ok {
		return errNoPrune
	}
	rep, err := p.PruneImages(r.Context())
	if err != nil {
		return err
	}
	out := pruneReport{SpaceReclaimed: rep.SpaceReclaimed}
	for _, d := range rep.Deleted {
		out.ImagesDeleted = append(out.ImagesDeleted, deletedImage(d))
	}
	a.Log.Info("pruned dangling images", "removed", len(out.ImagesDeleted), "bytes", out.SpaceReclaimed)
	writeJSON(w, http.StatusOK, out)
	return nil
}
