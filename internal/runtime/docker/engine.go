package docker

import "context"

// EngineInfo describes the engine, for diagnostics reports.
type EngineInfo struct {
	Version       string
	APIVersion    string
	StorageDriver string
	CgroupVersion string
	CgroupDriver  string
	Containers    int
	Running       int
}

// EngineInfo asks the engine what it is.
func (r *Runtime) EngineInfo(ctx context.Context) (EngineInfo, error) {
	info, err := r.cli.Info(ctx)
	if err != nil {
		return EngineInfo{}, wrap("info", "", err)
	}
	return EngineInfo{
		Version:       info.ServerVersion,
		APIVersion:    r.cli.ClientVersion(),
		StorageDriver: info.Driver,
		CgroupVersion: info.CgroupVersion,
		CgroupDriver:  info.CgroupDriver,
		Containers:    info.Containers,
		Running:       info.ContainersRunning,
	}, nil
}
