#include "framework/parallel/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/logging.h"

namespace mg {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kHelloMagic = "moegraph-store-v1";

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::string errno_text() {
  return std::strerror(errno);
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
}

// Waits until `fd` is readable (POLLIN) or writable (POLLOUT); false at the deadline.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    MG_CHECK(errno == EINTR, "store: poll failed: {}", errno_text());
  }
}

// Every byte of [data, data + size) written, or mg::Error (timeout, peer gone).
void send_all(int fd, const char* data, size_t size, Clock::time_point deadline,
              const std::string& peer) {
  while (size > 0) {
    MG_CHECK(wait_fd(fd, POLLOUT, deadline), "store: timed out sending to {}", peer);
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    MG_CHECK(n > 0, "store: sending to {} failed: {}", peer, errno_text());
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Exactly `size` bytes, or nullopt-like false on a timeout / closed connection (`why` says).
bool recv_all(int fd, char* data, size_t size, Clock::time_point deadline, std::string* why) {
  while (size > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) {
      *why = "timed out";
      return false;
    }
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) {
      *why = "connection closed";
      return false;
    }
    if (n < 0) {
      *why = errno_text();
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void send_message(int fd, const std::string& message, Clock::time_point deadline,
                  const std::string& peer) {
  MG_ASSERT(message.size() <= kMaxStoreMessage, "store message of {} bytes", message.size());
  const uint32_t n = htonl(static_cast<uint32_t>(message.size()));
  char header[4];
  std::memcpy(header, &n, 4);
  send_all(fd, header, 4, deadline, peer);
  send_all(fd, message.data(), message.size(), deadline, peer);
}

// One length-prefixed message of at most kMaxStoreMessage bytes; false with `why` otherwise.
bool recv_message(int fd, std::string* message, Clock::time_point deadline, std::string* why) {
  char header[4];
  if (!recv_all(fd, header, 4, deadline, why)) return false;
  uint32_t n = 0;
  std::memcpy(&n, header, 4);
  n = ntohl(n);
  if (n > kMaxStoreMessage) {
    *why = fmt::format("message of {} bytes announced, at most {} accepted", n, kMaxStoreMessage);
    return false;
  }
  message->resize(n);
  return recv_all(fd, message->data(), n, deadline, why);
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

void resolve(const LaunchEnv& env, bool passive, AddrInfo* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const std::string port = std::to_string(env.master_port);
  const int rc = ::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &out->list);
  MG_CHECK(rc == 0 && out->list != nullptr, "store: cannot resolve MASTER_ADDR '{}': {}",
           env.master_addr, ::gai_strerror(rc));
}

std::string store_name(const LaunchEnv& env) {
  return fmt::format("{}:{}", env.master_addr, env.master_port);
}

std::string serve(const LaunchEnv& env, const std::string& fingerprint, const std::string& payload,
                  std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  AddrInfo ai;
  resolve(env, true, &ai);
  Socket listener;
  std::string bind_error;
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (s.fd() < 0) continue;
    const int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), 128) == 0) {
      listener = std::move(s);
      break;
    }
    bind_error = errno_text();
  }
  MG_CHECK(listener.fd() >= 0,
           "store: rank 0 cannot listen on {} ({}); MASTER_ADDR must be an address of rank 0's "
           "host and MASTER_PORT a free port",
           store_name(env), bind_error);

  std::map<int, Socket> peers;  // rank -> connection
  std::vector<std::string> mismatches;
  while (static_cast<int>(peers.size()) < env.world_size - 1) {
    if (!wait_fd(listener.fd(), POLLIN, deadline)) break;
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    Socket c(::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&from), &from_len,
                       SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (c.fd() < 0) continue;
    std::string hello, why;
    // A silent connection may not hold up the others for long.
    const Clock::time_point hello_deadline =
        std::min(deadline, Clock::now() + std::chrono::seconds(10));
    if (!recv_message(c.fd(), &hello, hello_deadline, &why)) {
      MG_LOG_WARN("runtime", "store: ignored a connection that sent no hello ({})", why);
      continue;
    }
    // "<magic>\n<rank>\n<fingerprint>"
    const size_t a = hello.find('\n');
    const size_t b = a == std::string::npos ? a : hello.find('\n', a + 1);
    if (b == std::string::npos || hello.substr(0, a) != kHelloMagic) {
      MG_LOG_WARN("runtime", "store: ignored a connection that does not speak {}", kHelloMagic);
      continue;
    }
    const std::string rank_text = hello.substr(a + 1, b - a - 1);
    int rank = -1;
    try {
      rank = std::stoi(rank_text);
    } catch (const std::exception&) {
    }
    if (rank < 1 || rank >= env.world_size || peers.count(rank) != 0) {
      mismatches.push_back(fmt::format("a process says it is rank '{}' ({})", rank_text,
                                       peers.count(rank) != 0 ? "twice" : "out of range"));
      continue;
    }
    const std::string theirs = hello.substr(b + 1);
    if (theirs != fingerprint) {
      mismatches.push_back(
          fmt::format("rank {} runs '{}' but rank 0 runs '{}'", rank, theirs, fingerprint));
    }
    peers.emplace(rank, std::move(c));
  }

  std::string error;
  if (static_cast<int>(peers.size()) < env.world_size - 1) {
    std::vector<int> missing;
    for (int r = 1; r < env.world_size; ++r) {
      if (peers.count(r) == 0) missing.push_back(r);
    }
    error = fmt::format("rank(s) {} did not reach the store at {} within {} ms",
                        fmt::join(missing, ", "), store_name(env), timeout.count());
  } else if (!mismatches.empty()) {
    error = fmt::format("the ranks were started differently: {}", fmt::join(mismatches, "; "));
  }
  const std::string reply = error.empty() ? "ok\n" + payload : "error\n" + error;
  // The replies get their own short deadline: the peers are waiting for them right now.
  const Clock::time_point reply_deadline = Clock::now() + std::chrono::seconds(10);
  for (auto& [rank, c] : peers) {
    try {
      send_message(c.fd(), reply, reply_deadline, fmt::format("rank {}", rank));
    } catch (const Error& e) {
      if (error.empty()) error = e.what();
    }
  }
  MG_CHECK(error.empty(), "store: {}", error);
  return payload;
}

// A connected socket to rank 0's store; retries refused connections until the deadline.
Socket connect_to_store(const LaunchEnv& env, Clock::time_point deadline,
                        std::chrono::milliseconds timeout) {
  std::string last = "no attempt";
  while (true) {
    AddrInfo ai;
    resolve(env, false, &ai);
    for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
      Socket s(
          ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
      if (s.fd() < 0) continue;
      if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0) return s;
      if (errno == EINPROGRESS && wait_fd(s.fd(), POLLOUT, deadline)) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) return s;
        errno = err;
      }
      last = errno_text();
    }
    MG_CHECK(Clock::now() + std::chrono::milliseconds(100) < deadline,
             "store: rank {} could not connect to rank 0's store at {} within {} ms (last error: "
             "{}); is rank 0 running, and are MASTER_ADDR and MASTER_PORT the same on every rank?",
             env.rank, store_name(env), timeout.count(), last);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string join(const LaunchEnv& env, const std::string& fingerprint,
                 std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  Socket s = connect_to_store(env, deadline, timeout);
  const std::string peer = "rank 0's store at " + store_name(env);
  send_message(s.fd(), fmt::format("{}\n{}\n{}", kHelloMagic, env.rank, fingerprint), deadline,
               peer);
  std::string reply, why;
  // Rank 0 answers once every rank has arrived or its own deadline passed: allow it that much
  // plus a margin to send the answer.
  MG_CHECK(recv_message(s.fd(), &reply, deadline + std::chrono::seconds(15), &why),
           "store: rank {} got no answer from {} ({})", env.rank, peer, why);
  if (reply.starts_with("ok\n")) return reply.substr(3);
  MG_CHECK(!reply.starts_with("error\n"), "store: rank 0 reports: {}", reply.substr(6));
  MG_FAIL("store: rank {} got a malformed answer from {}", env.rank, peer);
}

}  // namespace

std::string store_exchange(const LaunchEnv& env, const std::string& fingerprint,
                           const std::string& payload, std::chrono::milliseconds timeout) {
  MG_CHECK(fingerprint.size() + 64 <= kMaxStoreMessage && payload.size() + 64 <= kMaxStoreMessage,
           "store: fingerprint ({} bytes) and payload ({} bytes) must each fit in {} bytes",
           fingerprint.size(), payload.size(), kMaxStoreMessage - 64);
  if (env.world_size == 1) return payload;
  return env.rank == 0 ? serve(env, fingerprint, payload, timeout)
                       : join(env, fingerprint, timeout);
}

}  // namespace mg
