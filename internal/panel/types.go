package panel

import (
	"encoding/json"
	"time"
)

// RawServer is one element of the boot listing: the server's settings and
// process configuration, kept raw so that one broken server does not stop
// the others from loading.
type RawServer struct {
	UUID                 string          `json:"uuid"`
	Settings             json.RawMessage `json:"settings"`
	ProcessConfiguration json.RawMessage `json:"process_configuration"`
}

// Pagination is the meta block of the server listing.
type Pagination struct {
	CurrentPage uint `json:"current_page"`
	From        uint `json:"from"`
	LastPage    uint `json:"last_page"`
	PerPage     uint `json:"per_page"`
	To          uint `json:"to"`
	Total       uint `json:"total"`
}

// ServerListPage is the body of GET /servers.
type ServerListPage struct {
	Data []RawServer `json:"data"`
	Meta Pagination  `json:"meta"`
}

// ServerConfiguration is the body of GET /servers/{uuid}.
type ServerConfiguration struct {
	Settings             json.RawMessage `json:"settings"`
	ProcessConfiguration json.RawMessage `json:"process_configuration"`
}

// InstallationScript is the body of GET /servers/{uuid}/install.
type InstallationScript struct {
	ContainerImage string `json:"container_image"`
	Entrypoint     string `json:"entrypoint"`
	Script         string `json:"script"`
}

// BackupUploadURLs is the body of GET /backups/{uuid}?size=.
type BackupUploadURLs struct {
	Parts    []string `json:"parts"`
	PartSize int64    `json:"part_size"`
	// MaxConcurrentUploads is how many parts may be uploaded at once
	// (Pelican, S3BackupSchema: backups.max_concurrent_uploads, default
	// 10); 0 when the panel does not say (Pterodactyl).
	MaxConcurrentUploads int `json:"max_concurrent_uploads"`
}

// BackupPart is one uploaded part of a remote backup. Both spellings are sent:
// the panels read part_number/etag, the spec names PartNumber/ETag.
type BackupPart struct {
	PartNumber int    `json:"part_number"`
	ETag       string `json:"etag"`
}

// MarshalJSON writes both spellings of the part keys.
func (p BackupPart) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		PartNumber  int    `json:"part_number"`
		ETag        string `json:"etag"`
		PartNumber2 int    `json:"PartNumber"`
		ETag2       string `json:"ETag"`
	}{p.PartNumber, p.ETag, p.PartNumber, p.ETag})
}

// BackupStatus is the body of POST /backups/{uuid}.
type BackupStatus struct {
	Checksum     string       `json:"checksum"`
	ChecksumType string       `json:"checksum_type"`
	Size         int64        `json:"size"`
	Successful   bool         `json:"successful"`
	Parts        []BackupPart `json:"parts"`
}

// Activity is one activity record sent with POST /activity.
type Activity struct {
	User      *string        `json:"user"`
	Server    string         `json:"server"`
	Event     string         `json:"event"`
	Metadata  map[string]any `json:"metadata"`
	IP        string         `json:"ip"`
	Timestamp time.Time      `json:"timestamp"`
}

// SFTPAuthRequest is the body of POST /sftp/auth.
type SFTPAuthRequest struct {
	Type          string `json:"type"` // "password" or "public_key"
	Username      string `json:"username"`
	Password      string `json:"password"`
	IP            string `json:"ip"`
	SessionID     []byte `json:"session_id"`
	ClientVersion []byte `json:"client_version"`
}

// SFTPAuthResponse is the answer of POST /sftp/auth.
type SFTPAuthResponse struct {
	Server      string   `json:"server"`
	User        string   `json:"user"`
	Permissions []string `json:"permissions"`
}
