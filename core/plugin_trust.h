// Who may have put a plugin file where the runtime found it (docs/plugins.md, "Security"). Loading
// a plugin runs its code in the host process, so a file that another user could have written or
// replaced is refused, as the dynamic loader in secure mode, OpenSSH's StrictModes and systemd
// refuse such files: the file and every folder on its path up to / must be owned by root or the
// runtime's effective user, and no other user may write to them (a group other than the runtime's
// that may is reported, not refused).
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

// Whether `canonical_file` (an absolute path without symbolic links, "." or "..", as
// std::filesystem::canonical gives) is trusted. `refusal` ("" when none) names the first
// offending path:
// - the file must be a regular file owned by root or ids.uid and not writable by every user;
// - every folder above it, up to /, must be owned by root or ids.uid and not writable by every
//   user unless it has the sticky bit (as /tmp: others may add entries there but not replace or
//   remove ours, and what they add is theirs and so refused by the owner rule).
// `warning` ("" when none) names the first file or folder writable by a group other than ids.gid
// (OpenSSH's StrictModes refuses those too; here they load with a diagnostic, since
// distributions make /usr/local writable by group staff, where `sudo pip install` puts packages).
struct TrustVerdict {
  std::string refusal;
  std::string warning;
};
TrustVerdict CheckTrustedPath(const std::string& canonical_file, const TrustedIds& ids);

}  // namespace attnrt::core
