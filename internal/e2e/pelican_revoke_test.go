package e2e

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestPelicanDeauthorizeNestedBody: removing a subuser in the Pelican panel
// (app/Repositories/Daemon/DaemonServerRepository.php, deauthorize) posts
// ['json' => ['user' => ..., 'servers' => [...]]] through Laravel's HTTP
// client, so the body nests the request under "json". Before the fix Wharf
// answered 400, the panel's job gave up and the removed subuser kept the
// console and SFTP until the token expired. The test sends the panel's exact
// bytes: the user's websocket and SSH connection on the listed server close
// within a second, their old token is refused, and another user stays.
func TestPelicanDeauthorizeNestedBody(t *testing.T) {
	t.Parallel()
	n := twoUsersNode(t, nil)
	waitNextSecond()
	aliceSFTP := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	bobSFTP := n.sftpOpen(t, sftpLogin("bob", sftpSrvA), ssh.Password(sftpOther2))
	aliceTok := n.sign(t, wsClaims(sftpSrvA, sftpOwner, "*"))
	aliceWS := n.mustDial(t, sftpSrvA)
	aliceWS.auth(aliceTok)
	bobWS := n.mustDial(t, sftpSrvA)
	bobWS.auth(n.sign(t, wsClaims(sftpSrvA, sftpOther, "*")))

	body := `{"json":{"user":"` + sftpOwner + `","servers":["` + sftpSrvA + `"]}}`
	if res, got := n.request("POST", "/api/deauthorize-user", body, ""); res.StatusCode != 204 {
		t.Fatalf("the Pelican panel's deauthorize body: %d %s (the panel gives up and the subuser keeps access)", res.StatusCode, got)
	}
	if code := aliceWS.closed(time.Second); code != 4401 {
		t.Fatalf("the removed subuser's console closed with %d, want 4401: they can still watch and type", code)
	}
	waitClosed(t, aliceSFTP.ssh, time.Second, "the removed subuser's SSH connection")
	stillOpen(t, bobSFTP, "another user's SFTP session")
	bobWS.send("send stats")
	bobWS.expect("stats", 5*time.Second, nil)

	again := n.mustDial(t, sftpSrvA)
	again.send("auth", aliceTok)
	if m := again.expect2("auth success", "jwt error", 5*time.Second); m.Event != "jwt error" {
		t.Fatal("the removed subuser's old token was accepted again")
	}

	// Both shapes at once are ambiguous: refused with a JSON error, nothing done.
	both := `{"user":"` + sftpOther + `","json":{"user":"` + sftpOther + `"}}`
	if res, got := n.request("POST", "/api/deauthorize-user", both, ""); res.StatusCode != 400 || !strings.Contains(string(got), `"error"`) {
		t.Fatalf("both shapes: %d %s", res.StatusCode, got)
	}
	stillOpen(t, bobSFTP, "another user after a refused request")
}
