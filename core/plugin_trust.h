// Who may have put a plugin file where the runtime found it (docs/plugins.md, "Security"). Loading
// a plugin runs its code in the host process, so a file that another user could have written or
// replaced is refused, as the dynamic loader in secure mode, OpenSSH's StrictModes and systemd
// refuse such files: the file and every folder on its path up to / must be owned by root or the
// runtime's effective user, and no one else may write to them.
#pragma once

#include <sys/types.h>

#include <string>

namespace attnrt::core {

// The runtime's effective user and group, against which ownership and write permission are judged.
struct TrustedIds {
  uid_t uid = 0;
  gid_t gid = 0;
};
TrustedIds ProcessIds();

// "" when `canonical_file` (an absolute path without symbolic links, "." or "..", as
// std::filesystem::canonical gives) is trusted; else why not, naming the first offending path:
// - the file must be a regular file owned by root or ids.uid, writable neither by every user nor
//   by a group other than ids.gid;
// - every folder above it, up to /, must be owned by root or ids.uid, and writable neither by
//   every user nor by a group other than ids.gid unless it has the sticky bit (as /tmp: others
//   may add entries there but not replace or remove ours, and what they add is theirs and so
//   refused by the owner rule).
std::string CheckTrustedPath(const std::string& canonical_file, const TrustedIds& ids);

}  // namespace attnrt::core
