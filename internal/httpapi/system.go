package httpapi

import (
	"net/http"
	"runtime"

	"github.com/wharf/wharf/internal/hostinfo"
)

// maxUpdateBody bounds POST /api/update; panels send a few KiB.
const maxUpdateBody = 16 << 20

type systemInfo struct {
	Architecture  string `json:"architecture"`
	CPUCount      int    `json:"cpu_count"`
	KernelVersion string `json:"kernel_version"`
	OS            string `json:"os"`
	Version       string `json:"version"`
}

func (a *API) getSystem(w http.ResponseWriter, r *http.Request) error {
	if r.URL.Query().Get("v") == "2" {
		return a.getSystemV2(w, r)
	}
	writeJSON(w, http.StatusOK, systemInfo{
		Architecture:  runtime.GOARCH,
		CPUCount:      runtime.NumCPU(),
		KernelVersion: hostinfo.KernelRelease(),
		OS:            runtime.GOOS,
		Version:       a.Version,
	})
	return nil
}

type updateResponse struct {
	Applied bool `json:"applied"`
}

func (a *API) postUpdate(w http.ResponseWriter, r *http.Request) error {
	old := a.Config.Get()
	res, err := a.Config.ApplyPanelUpdate(http.MaxBytesReader(w, r.Body, maxUpdateBody))
	if err != nil {
		return err
	}
	if res.Applied {
		next := a.Config.Get()
		a.Log.Info("configuration updated by the backend", "kept_local_keys", res.Kept, "restart_needed_for", res.NeedsRestart)
		a.OnConfigApplied(old, next)
	} else {
		a.Log.Info("configuration update from the backend ignored (ignore_panel_config_updates)")
	}
	writeJSON(w, http.StatusOK, updateResponse{Applied: res.Applied})
	return nil
}
