package main

import (
	"fmt"
	"net"
)

// Admin changes the fleet: it removes workers (a full outage in two calls),
// adds them, and makes the router dial the addresses it is given. So kvgate
// never serves it where other hosts can reach it without a key that only
// operators hold: on a listener that is not loopback, Admin needs
// --admin-api-key, and kvgate refuses to start without one. The Router key
// (--api-key) does not count, since every client holds it. Refusing to start
// was chosen over quietly moving Admin to another port: a deployment that
// worked in a test and then loses Admin in production would be a surprise,
// and the message says both ways out.

// adminExposure returns why Admin may not be served at host (the address
// it listens on: --host, or --admin-host with --admin-port), or nil.
func (c serveConfig) adminExposure(host string) error {
	// An Admin key equal to the Router key is the Router key.
	if (c.adminAPIKey != "" && c.adminAPIKey != c.apiKey) || loopbackHost(host) {
		return nil
	}
	where, flagName := "beside Router", "--host"
	if c.adminPort >= 0 {
		where, flagName = "on its own port", "--admin-host"
	}
	return fmt.Errorf("Admin would be served %s on %s (%s), which is not loopback, without an --admin-api-key of its own: any client that reaches it "+
		"could remove every worker or make the router dial any address. Set --admin-api-key (or --admin-api-key-file, "+
		"$KVGATE_ADMIN_API_KEY), or serve Admin on loopback with --admin-port=PORT (--admin-host defaults to 127.0.0.1; "+
		"reach it with kubectl port-forward or a tunnel)", where, host, flagName)
}

// loopbackHost reports whether host (an IP, "localhost", or a listener's
// address without its port) is loopback. Unspecified addresses (0.0.0.0,
// ::) listen on every interface, so they are not.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// adminListenerExposure checks the address a listener got (a "localhost"
// that resolved elsewhere is caught here).
func (c serveConfig) adminListenerExposure(addr net.Addr) error {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return c.adminExposure(ta.IP.String())
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return c.adminExposure(addr.String())
	}
	return c.adminExposure(host)
}
