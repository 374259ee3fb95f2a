// vcsim for the project's tests: govmomi's simulator.VPX() on 127.0.0.1 over TLS (a certificate
// of its own for 127.0.0.1, written as a PEM file so tests can use `ca-file`), the tagging REST
// API under /rest, and a small admin API under /vcsim-admin that tests use to shape the
// inventory in ways SOAP alone cannot (guest NICs with deviceConfigId -1, several IPs per NIC,
// lost sessions) and that counts every SOAP and REST call for the call budgets.
//
// Debian ships the simulator library but not upstream's vcsim command, whose HEAD needs modules
// that cannot be fetched here; this main is ours.
package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/simulator"
	_ "github.com/vmware/govmomi/vapi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// The simulator serves one request per object at a time; the admin API changes guest data
// under the same per-object lock.
var admin struct {
	sync.Mutex
	client *govmomi.Client
}

// Calls counted by method (SOAP) or by verb and path (REST), for the call budgets.
var calls = struct {
	sync.Mutex
	byName map[string]int
}{byName: map[string]int{}}

// The admin API's own SOAP calls are not counted.
const adminAgent = "vcsim-admin"

var soapMethod = regexp.MustCompile(`<(?:[A-Za-z0-9_]+:)?Body[^>]*>\s*<(?:[A-Za-z0-9_]+:)?([A-Za-z0-9_]+)`)
var restID = regexp.MustCompile(`/id:[^/?]+`)

func count(name string) {
	calls.Lock()
	calls.byName[name]++
	calls.Unlock()
}

func counting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("User-Agent") == adminAgent:
		case strings.HasPrefix(r.URL.Path, "/sdk"):
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if m := soapMethod.FindSubmatch(body); m != nil {
				count("soap " + string(m[1]))
			}
		case strings.HasPrefix(r.URL.Path, "/rest"):
			path := restID.ReplaceAllString(r.URL.Path, "/id:*")
			if a := r.URL.Query().Get("~action"); a != "" {
				path += "?~action=" + a
			}
			count("rest " + r.Method + " " + path)
		}
		next.ServeHTTP(w, r)
	})
}

// certificate makes a CA (written to path, a cloud config's ca-file) and a server certificate
// for 127.0.0.1 signed by it: webpki refuses a CA certificate used as the server's own.
func certificate(path string) (tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	ca := x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "vcsim test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, &ca, &ca, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf := x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano() + 1),
		Subject:      pkix.Name{CommonName: "vcsim"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, &leaf, &ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// NIC is one entry of guest.net.
type NIC struct {
	Network        string   `json:"network"`
	IPs            []string `json:"ips"`
	DeviceConfigID *int32   `json:"deviceConfigId"`
	MAC            string   `json:"mac"`
}

// VMSpec is what POST /vcsim-admin/vm creates.
type VMSpec struct {
	Name       string `json:"name"`
	UUID       string `json:"uuid"`
	GuestID    string `json:"guestId"`
	NumCPU     int32  `json:"numCpu"`
	MemoryMB   int64  `json:"memoryMB"`
	Datacenter string `json:"datacenter"`
	Guest
}

// Guest is the guest data VMware Tools would report.
type Guest struct {
	HostName  string `json:"hostName"`
	IPAddress string `json:"ipAddress"`
	NICs      []NIC  `json:"nics"`
}

func setGuest(ref types.ManagedObjectReference, g Guest) error {
	vm, ok := simulator.Map.Get(ref).(*simulator.VirtualMachine)
	if !ok {
		return fmt.Errorf("no VM %s", ref.Value)
	}
	simulator.Map.WithLock(vm, func() {
		vm.Guest.HostName = g.HostName
		vm.Guest.IpAddress = g.IPAddress
		vm.Summary.Guest.HostName = g.HostName
		vm.Summary.Guest.IpAddress = g.IPAddress
		vm.Guest.Net = nil
		for i, n := range g.NICs {
			id := int32(4000 + i)
			if n.DeviceConfigID != nil {
				id = *n.DeviceConfigID
			}
			vm.Guest.Net = append(vm.Guest.Net, types.GuestNicInfo{
				Network: n.Network, IpAddress: n.IPs, DeviceConfigId: id, MacAddress: n.MAC, Connected: true,
			})
		}
	})
	return nil
}

func createVM(ctx context.Context, spec VMSpec) (types.ManagedObjectReference, error) {
	c := admin.client
	finder := find.NewFinder(c.Client, false)
	var dc *object.Datacenter
	var err error
	if spec.Datacenter != "" {
		dc, err = finder.Datacenter(ctx, spec.Datacenter)
	} else {
		dc, err = finder.DefaultDatacenter(ctx)
	}
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	finder.SetDatacenter(dc)
	folders, err := dc.Folders(ctx)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	// A cluster's pool (the VPX model also has a standalone host with a pool of its own).
	pools, err := finder.ResourcePoolList(ctx, "*/Resources")
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	pool := pools[len(pools)-1]
	for _, p := range pools {
		if strings.Contains(p.InventoryPath, "_C") {
			pool = p
			break
		}
	}
	ds, err := finder.DefaultDatastore(ctx)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	config := types.VirtualMachineConfigSpec{
		Name:     spec.Name,
		Uuid:     spec.UUID,
		GuestId:  spec.GuestID,
		NumCPUs:  spec.NumCPU,
		MemoryMB: spec.MemoryMB,
		Files:    &types.VirtualMachineFileInfo{VmPathName: "[" + ds.Name() + "]"},
	}
	task, err := folders.VmFolder.CreateVM(ctx, config, pool, nil)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	info, err := task.WaitForResult(ctx, nil)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	ref := info.Result.(types.ManagedObjectReference)
	vm := object.NewVirtualMachine(c.Client, ref)
	if task, err = vm.PowerOn(ctx); err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		return ref, err
	}
	return ref, setGuest(ref, spec.Guest)
}

func vmAction(ctx context.Context, ref types.ManagedObjectReference, action string) error {
	vm := object.NewVirtualMachine(admin.client.Client, ref)
	var task *object.Task
	var err error
	switch action {
	case "power-off":
		task, err = vm.PowerOff(ctx)
	case "power-on":
		task, err = vm.PowerOn(ctx)
	case "suspend":
		task, err = vm.Suspend(ctx)
	case "destroy":
		// vSphere destroys only powered-off VMs; a test's "the VM was deleted" means both.
		if off, e := vm.PowerOff(ctx); e == nil {
			_ = off.Wait(ctx)
		}
		task, err = vm.Destroy(ctx)
	default:
		return fmt.Errorf("unknown action %q", action)
	}
	if err != nil {
		return err
	}
	return task.Wait(ctx)
}

// terminateSessions ends every session but the admin's own: vCenter forgetting its clients.
func terminateSessions(ctx context.Context) (int, error) {
	c := admin.client
	var sm mo.SessionManager
	pc := property.DefaultCollector(c.Client)
	if err := pc.RetrieveOne(ctx, *c.ServiceContent.SessionManager, []string{"sessionList", "currentSession"}, &sm); err != nil {
		return 0, err
	}
	var ids []string
	for _, s := range sm.SessionList {
		if sm.CurrentSession == nil || s.Key != sm.CurrentSession.Key {
			ids = append(ids, s.Key)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	_, err := methods.TerminateSession(ctx, c.Client, &types.TerminateSession{This: *c.ServiceContent.SessionManager, SessionId: ids})
	return len(ids), err
}

// sessions counts the SOAP sessions but the admin's own (a client that logged out left none).
func sessions(ctx context.Context) (int, error) {
	c := admin.client
	var sm mo.SessionManager
	pc := property.DefaultCollector(c.Client)
	if err := pc.RetrieveOne(ctx, *c.ServiceContent.SessionManager, []string{"sessionList", "currentSession"}, &sm); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range sm.SessionList {
		if sm.CurrentSession == nil || s.Key != sm.CurrentSession.Key {
			n++
		}
	}
	return n, nil
}

// setExtraConfig sets config.extraConfig keys (guestinfo.metadata, as cloud-init's VMware
// datasource reads it) through ReconfigVM, as govc vm.change -e does.
func setExtraConfig(ctx context.Context, ref types.ManagedObjectReference, values map[string]string) error {
	var opts []types.BaseOptionValue
	for k, v := range values {
		opts = append(opts, &types.OptionValue{Key: k, Value: v})
	}
	vm := object.NewVirtualMachine(admin.client.Client, ref)
	task, err := vm.Reconfigure(ctx, types.VirtualMachineConfigSpec{ExtraConfig: opts})
	if err != nil {
		return err
	}
	return task.Wait(ctx)
}

// Ref is a managed object reference as the admin API answers it.
type Ref struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// placement is where a VM runs: its host, resource pool, and the host's cluster and
// datacenter, for tests that tag them (zones and regions).
func placement(vmRef types.ManagedObjectReference) (map[string]Ref, error) {
	vm, ok := simulator.Map.Get(vmRef).(*simulator.VirtualMachine)
	if !ok {
		return nil, fmt.Errorf("no VM %s", vmRef.Value)
	}
	out := map[string]Ref{}
	var host, pool *types.ManagedObjectReference
	simulator.Map.WithLock(vm, func() {
		host, pool = vm.Runtime.Host, vm.ResourcePool
	})
	if host == nil {
		return nil, fmt.Errorf("VM %s has no host", vmRef.Value)
	}
	out["host"] = Ref{host.Type, host.Value}
	if pool != nil {
		out["pool"] = Ref{pool.Type, pool.Value}
	}
	for cur := *host; ; {
		e, ok := simulator.Map.Get(cur).(mo.Entity)
		if !ok || e.Entity().Parent == nil {
			break
		}
		parent := *e.Entity().Parent
		switch parent.Type {
		case "ClusterComputeResource", "ComputeResource":
			out["cluster"] = Ref{parent.Type, parent.Value}
		case "Datacenter":
			out["datacenter"] = Ref{parent.Type, parent.Value}
		}
		cur = parent
	}
	return out, nil
}

func reply(w http.ResponseWriter, v interface{}, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

func adminAPI(w http.ResponseWriter, r *http.Request) {
	admin.Lock()
	defer admin.Unlock()
	ctx := r.Context()
	path := strings.TrimPrefix(r.URL.Path, "/vcsim-admin/")
	parts := strings.Split(path, "/")
	switch {
	case path == "calls" && r.Method == http.MethodGet:
		calls.Lock()
		defer calls.Unlock()
		reply(w, calls.byName, nil)
	case path == "calls" && r.Method == http.MethodDelete:
		calls.Lock()
		calls.byName = map[string]int{}
		calls.Unlock()
		reply(w, map[string]int{}, nil)
	case path == "sessions/terminate" && r.Method == http.MethodPost:
		n, err := terminateSessions(ctx)
		reply(w, map[string]int{"terminated": n}, err)
	case path == "vm" && r.Method == http.MethodPost:
		var spec VMSpec
		if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
			reply(w, nil, err)
			return
		}
		ref, err := createVM(ctx, spec)
		reply(w, map[string]string{"moref": ref.Value}, err)
	case path == "vms" && r.Method == http.MethodPost:
		// Many VMs in one request (benchmarks create hundreds).
		var specs []VMSpec
		if err := json.NewDecoder(r.Body).Decode(&specs); err != nil {
			reply(w, nil, err)
			return
		}
		morefs := []string{}
		for _, spec := range specs {
			ref, err := createVM(ctx, spec)
			if err != nil {
				reply(w, nil, fmt.Errorf("%s: %v", spec.Name, err))
				return
			}
			morefs = append(morefs, ref.Value)
		}
		reply(w, map[string][]string{"morefs": morefs}, nil)
	case path == "sessions" && r.Method == http.MethodGet:
		n, err := sessions(ctx)
		reply(w, map[string]int{"sessions": n}, err)
	case len(parts) == 3 && parts[0] == "vm" && parts[2] == "guest" && r.Method == http.MethodPost:
		var g Guest
		if err := json.NewDecoder(r.Body).Decode(&g); err != nil {
			reply(w, nil, err)
			return
		}
		err := setGuest(types.ManagedObjectReference{Type: "VirtualMachine", Value: parts[1]}, g)
		reply(w, map[string]string{}, err)
	case len(parts) == 3 && parts[0] == "vm" && parts[2] == "extra-config" && r.Method == http.MethodPost:
		var values map[string]string
		if err := json.NewDecoder(r.Body).Decode(&values); err != nil {
			reply(w, nil, err)
			return
		}
		err := setExtraConfig(ctx, types.ManagedObjectReference{Type: "VirtualMachine", Value: parts[1]}, values)
		reply(w, map[string]string{}, err)
	case len(parts) == 3 && parts[0] == "vm" && parts[2] == "placement" && r.Method == http.MethodGet:
		p, err := placement(types.ManagedObjectReference{Type: "VirtualMachine", Value: parts[1]})
		reply(w, p, err)
	case len(parts) == 3 && parts[0] == "vm" && r.Method == http.MethodPost:
		err := vmAction(ctx, types.ManagedObjectReference{Type: "VirtualMachine", Value: parts[1]}, parts[2])
		reply(w, map[string]string{}, err)
	default:
		http.Error(w, "unknown admin call", http.StatusNotFound)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	username := flag.String("username", "vcsim-user", "the one accepted login name")
	password := flag.String("password", "vcsim-pass", "its password")
	dcs := flag.Int("dc", 1, "datacenters")
	vms := flag.Int("vm", 0, "model VMs per resource pool (tests create their own)")
	status := flag.String("status", "", "write the URLs and credentials here as JSON once serving")
	certFile := flag.String("cert", "", "write the server's certificate here (PEM)")
	flag.Parse()

	model := simulator.VPX()
	model.Datacenter = *dcs
	model.Machine = *vms
	if err := model.Create(); err != nil {
		log.Fatal(err)
	}
	cert, err := certificate(*certFile)
	if err != nil {
		log.Fatal(err)
	}
	model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	model.Service.RegisterEndpoints = true
	model.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(*username, *password)}
	model.Service.HandleFunc("/vcsim-admin/", adminAPI)
	server := model.Service.NewServer()
	// Before anyone knows the port: count every call from the first.
	server.Config.Handler = counting(server.Config.Handler)

	ctx := context.Background()
	u := *server.URL
	u.User = url.UserPassword(*username, *password)
	admin.client, err = govmomi.NewClient(ctx, &u, true)
	if err != nil {
		log.Fatal(err)
	}
	admin.client.Client.UserAgent = adminAgent
	calls.Lock()
	calls.byName = map[string]int{}
	calls.Unlock()

	host := server.URL.Host
	hostname, port, _ := net.SplitHostPort(host)
	info := map[string]interface{}{
		"url":      "https://" + host + "/sdk",
		"server":   hostname,
		"port":     port,
		"username": *username,
		"password": *password,
		"admin":    "https://" + host + "/vcsim-admin",
		"pid":      os.Getpid(),
	}
	text, _ := json.MarshalIndent(info, "", "  ")
	if *status != "" {
		tmp := *status + ".tmp"
		if err := os.WriteFile(tmp, text, 0o644); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(tmp, *status); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(string(text))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	server.Close()
}
