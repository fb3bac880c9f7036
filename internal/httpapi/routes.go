package httpapi

import "net/http"

type authKind int

const (
	// authBearer: the node token in "Authorization: Bearer <token>".
	authBearer authKind = iota
	// authSigned: the handler verifies a JWT itself (a signed URL's token
	// query, a transfer's Authorization header, a websocket's first message).
	authSigned
)

type route struct {
	pattern string
	auth    authKind
	handler http.Handler
}

// routes is the whole HTTP interface of the daemon. Everything under /api/
// that is not listed here also requires the bearer token before it is
// answered with 404 or 405.
func (a *API) routes() []route {
	return []route{
		// Signed URLs for end users (JWT in the query).
		{"GET /download/file", authSigned, a.handle(a.getDownloadFile)},
		{"GET /download/backup", authSigned, a.handle(a.getDownloadBackup)},
		{"POST /upload/file", authSigned, a.handle(a.postUploadFile)},

		// Node
		{"GET /api/system", authBearer, a.handle(a.getSystem)},
		{"POST /api/update", authBearer, a.handle(a.postUpdate)},
		{"GET /api/servers", authBearer, a.handle(a.listServers)},
		{"POST /api/servers", authBearer, a.handle(a.postServers)},
		{"POST /api/deauthorize-user", authBearer, a.handle(a.postDeauthorize)},
		{"GET /api/system/utilization", authBearer, a.handle(a.getUtilization)},
		{"GET /api/system/ips", authBearer, a.handle(a.getIPs)},
		{"GET /api/diagnostics", authBearer, a.handle(a.getDiagnostics)},
		{"DELETE /api/system/docker/image/prune", authBearer, a.handle(a.deletePruneImages)},

		// Server lifecycle
		{"GET /api/servers/{server}", authBearer, a.withServer(a.getServer)},
		{"DELETE /api/servers/{server}", authBearer, a.withServer(a.deleteServer)},
		{"POST /api/servers/{server}/power", authBearer, a.withServer(a.postPower)},
		{"POST /api/servers/{server}/commands", authBearer, a.withServer(a.postCommands)},
		{"GET /api/servers/{server}/logs", authBearer, a.withServer(a.getLogs)},
		{"POST /api/servers/{server}/install", authBearer, a.withServer(a.postInstall(false))},
		{"POST /api/servers/{server}/reinstall", authBearer, a.withServer(a.postInstall(true))},
		{"POST /api/servers/{server}/sync", authBearer, a.withServer(a.postSync)},
		{"GET /api/servers/{server}/install-logs", authBearer, a.withServer(a.getInstallLogs)},

		// Websocket console
		{"GET /api/servers/{server}/ws", authSigned, a.handle(a.getWebsocket)},
		{"POST /api/servers/{server}/ws/deny", authBearer, a.withServer(a.postWSDeny)},

		// Backups
		{"POST /api/servers/{server}/backup", authBearer, a.withServer(a.postBackup)},
		{"POST /api/servers/{server}/backup/{backup}/restore", authBearer, a.withServer(a.postRestore)},
		{"DELETE /api/servers/{server}/backup/{backup}", authBearer, a.withServer(a.deleteBackup)},

		// Transfers
		{"POST /api/servers/{server}/transfer", authBearer, a.withServer(a.postTransfer)},
		{"DELETE /api/servers/{server}/transfer", authBearer, a.withServer(a.deleteTransfer)},
		{"POST /api/transfers", authSigned, a.handle(a.postTransfers)},
		{"GET /api/transfers", authSigned, a.handle(a.getTransfers)},
		{"DELETE /api/transfers/{server}", authBearer, a.handle(a.deleteIncomingTransfer)},

		// File manager
		{"GET /api/servers/{server}/files/contents", authBearer, a.withServer(a.getFileContents)},
		{"GET /api/servers/{server}/files/list-directory", authBearer, a.withServer(a.getListDirectory)},
		{"PUT /api/servers/{server}/files/rename", authBearer, a.withServer(a.putRename)},
		{"POST /api/servers/{server}/files/copy", authBearer, a.withServer(a.postCopy)},
		{"POST /api/servers/{server}/files/write", authBearer, a.withServer(a.postWrite)},
		{"POST /api/servers/{server}/files/create-directory", authBearer, a.withServer(a.postCreateDirectory)},
		{"POST /api/servers/{server}/files/delete", authBearer, a.withServer(a.postDelete)},
		{"POST /api/servers/{server}/files/chmod", authBearer, a.withServer(a.postChmod)},
		{"POST /api/servers/{server}/files/compress", authBearer, a.withServer(a.postCompress)},
		{"POST /api/servers/{server}/files/decompress", authBearer, a.withServer(a.postDecompress)},
		{"GET /api/servers/{server}/files/search", authBearer, a.withServer(a.getSearch)},
		{"GET /api/servers/{server}/files/pull", authBearer, a.withServer(a.getPulls)},
		{"POST /api/servers/{server}/files/pull", authBearer, a.withServer(a.postPull)},
		{"DELETE /api/servers/{server}/files/pull/{download}", authBearer, a.withServer(a.deletePull)},
	}
}
