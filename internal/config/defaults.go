package config

import "path/filepath"

// DefaultPath is where the configuration lives unless --config says otherwise.
const DefaultPath = "/etc/service/config.yml"

// Defaults returns a configuration holding every default value. Required
// values (uuid, token_id, token, remote) are empty.
func Defaults() *Config {
	return &Config{
		AppName: "Wharf",
		API: API{
			Host:           "0.0.0.0",
			Port:           8080,
			UploadLimit:    100,
			RemoteDownload: RemoteDownload{MaxRedirects: 10},
		},
		System: System{
			RootDirectory:          "/var/lib/service",
			LogDirectory:           "/var/log/service",
			LogFormat:              "text",
			Data:                   "/var/lib/service/volumes",
			ArchiveDirectory:       "/var/lib/service/archives",
			BackupDirectory:        "/var/lib/service/backups",
			TmpDirectory:           "/tmp/service",
			Username:               "service",
			DiskCheckInterval:      5,
			DiskWalkInterval:       150,
			DiskEntryLimit:         500000,
			ActivitySendInterval:   60,
			ActivitySendCount:      100,
			CheckPermissionsOnBoot: true,
			WebsocketLogCount:      150,
			SFTP: SFTP{
				BindAddress: "0.0.0.0", BindPort: 2022,
				MaxHandles: 256, MaxSessions: 10, MaxConnectionsPerServer: 32, MaxStartups: 64, MaxStartupsPerSource: 10, LoginGraceTime: 30,
				UploadGCHeadroom: 32,
			},
			CrashDetection:     CrashDetection{Enabled: true, DetectCleanExitAsCrash: true, Timeout: 60},
			CrashActivityLines: 2,
			Backups: Backups{
				CompressionLevel: "best_speed", Layout: "auto", ObjectStorePartsOnDisk: 2, Downloads: defaultBackupDownloads(),
				Browse: true, BrowseDirectory: DefaultBrowseDirectory,
				Repository: BackupRepository{DedupScope: DedupScopeServer, MaxUnusedPercent: 5},
			},
			Transfers:  Transfers{Live: true, Compression: "auto", MaxBackups: 32},
			Decompress: Decompress{MemoryLimit: 1024, CPULimit: 1800, Timeout: 3600},
			User:       SystemUser{Passwd: Passwd{Enable: true}},
			MachineID:  MachineID{Enable: true},
		},
		Docker: Docker{
			Network: DockerNetwork{
				Interface:  "172.18.0.1",
				DNS:        []string{"1.1.1.1", "1.0.0.1"},
				Name:       "service_nw",
				Driver:     "bridge",
				Mode:       "service_nw",
				EnableICC:  false,
				Firewall:   true,
				NetworkMTU: 1500,
				EnableIPv6: true,
				BridgeName: "service0",
				Interfaces: NetworkInterfaces{
					V4: Subnet{Subnet: "172.18.0.0/16", Gateway: "172.18.0.1"},
					V6: Subnet{Subnet: "fdba:17c8:6c94::/64", Gateway: "fdba:17c8:6c94::1011"},
				},
			},
			Registries:        map[string]RegistryAuth{},
			TmpfsSize:         100,
			ContainerPidLimit: 512,
			InstallerLimits:   InstallerLimits{Memory: 1024, CPU: 100},
			Overhead:          Overhead{DefaultMultiplier: 1.05, Multipliers: map[int64]float64{}},
			LogConfig: LogConfig{
				Type: "local",
				Config: map[string]string{
					"compress": "false",
					"max-file": "1",
					"max-size": "5m",
					"mode":     "non-blocking",
				},
			},
		},
		Throttles:   Throttles{Enabled: true, Lines: 2000, LineResetInterval: 100},
		RemoteQuery: RemoteQuery{Timeout: 30, BootServersPerPage: 50},
	}
}

// PlaceUnder puts every system directory under dir, for a node that keeps all
// of its state in one place (dev mode, tests).
func (c *Config) PlaceUnder(dir string) {
	c.System.RootDirectory = filepath.Join(dir, "lib")
	c.System.Data = filepath.Join(dir, "lib", "volumes")
	c.System.ArchiveDirectory = filepath.Join(dir, "lib", "archives")
	c.System.BackupDirectory = filepath.Join(dir, "lib", "backups")
	c.System.LogDirectory = filepath.Join(dir, "log")
	c.System.TmpDirectory = filepath.Join(dir, "tmp")
}

// PasswdDirectory is where /etc/passwd and /etc/group for containers are
// written: system.user.passwd.directory, by default <root_directory>/etc.
func (s System) PasswdDirectory() string {
	if s.User.Passwd.Directory != "" {
		return s.User.Passwd.Directory
	}
	return filepath.Join(s.RootDirectory, "etc")
}

// MachineIDDirectory holds the per-server machine-id files:
// system.machine_id.directory, by default <root_directory>/machine-id.
func (s System) MachineIDDirectory() string {
	if s.MachineID.Directory != "" {
		return s.MachineID.Directory
	}
	return filepath.Join(s.RootDirectory, "machine-id")
}
