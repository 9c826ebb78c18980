// Ends the connections a listener accepted, so that a stopping server does
// not wait for idle keep-alive clients (httplib keeps a worker on an idle
// connection for its whole keep-alive timeout).
#ifndef NARWHAL_ENGINES_SIM_ACCEPTED_SOCKETS_H_
#define NARWHAL_ENGINES_SIM_ACCEPTED_SOCKETS_H_

namespace narwhal::sim {

// Shuts down (both directions) every connected socket of this process whose
// local port is `local_port`; the owner still closes the descriptors.
// Returns how many were shut down. Scans /proc/self/fd.
int ShutdownAcceptedSockets(int local_port);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_ACCEPTED_SOCKETS_H_
