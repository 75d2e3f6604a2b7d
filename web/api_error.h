// How an API handler refuses a request: throw ApiError with the HTTP status and one line that
// says what was wrong; the route wrapper turns it into {"error": "..."} with that status.
#pragma once

#include <stdexcept>
#include <string>

namespace memsnap::web {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

}  // namespace memsnap::web
