#include "core/plugin_trust.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace attnrt::core {
namespace {

std::string Octal(mode_t mode) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "%04o", static_cast<unsigned>(mode & 07777));
  return buffer;
}

std::string UserName(uid_t uid) {
  std::string text = "uid " + std::to_string(uid);
  passwd entry{};
  passwd* found = nullptr;
  char buffer[4096];
  if (getpwuid_r(uid, &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr) {
    text += " (" + std::string(found->pw_name) + ")";
  }
  return text;
}

std::string GroupName(gid_t gid) {
  std::string text = "gid " + std::to_string(gid);
  group entry{};
  group* found = nullptr;
  char buffer[4096];
  if (getgrgid_r(gid, &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr) {
    text += " (" + std::string(found->gr_name) + ")";
  }
  return text;
}

// "" when one path component (the file, or a folder above it) passes; else the reason. A
// component writable by another group only is no refusal: it goes to *group_writable (the first
// one found) instead.
std::string CheckComponent(const std::string& path, bool is_file, const TrustedIds& ids,
                           std::string* group_writable) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    return "cannot read the status of " + path + ": " + std::strerror(errno);
  }
  const char* what = is_file ? "file " : "folder ";
  if (is_file ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode)) {
    // The path was resolved just before: a component that is now something else (a symbolic
    // link, say) was changed under the runtime.
    return std::string(what) + path + " is no longer a " + (is_file ? "regular file" : "folder") +
           " (changed while it was checked)";
  }
  if (st.st_uid != 0 && st.st_uid != ids.uid) {
    return std::string(what) + path + " is owned by " + UserName(st.st_uid) +
           ", neither root nor the runtime's user, " + UserName(ids.uid);
  }
  const bool sticky = !is_file && (st.st_mode & S_ISVTX) != 0;
  if (sticky) return "";
  const std::string mode = " (mode " + Octal(st.st_mode) + ")";
  const std::string no_sticky = is_file ? "" : ", without the sticky bit";
  if ((st.st_mode & S_IWOTH) != 0) {
    return std::string(what) + path + " is writable by every user" + mode + no_sticky;
  }
  if ((st.st_mode & S_IWGRP) != 0 && st.st_gid != ids.gid && group_writable->empty()) {
    *group_writable = std::string(what) + path + " is writable by group " + GroupName(st.st_gid) +
                      ", not the runtime's group " + GroupName(ids.gid) + mode + no_sticky;
  }
  return "";
}

}  // namespace

TrustedIds ProcessIds() { return {geteuid(), getegid()}; }

TrustVerdict CheckTrustedPath(const std::string& canonical_file, const TrustedIds& ids) {
  TrustVerdict verdict;
  if (canonical_file.empty() || canonical_file.front() != '/') {
    verdict.refusal = "path " + canonical_file + " is not absolute";
    return verdict;
  }
  verdict.refusal = CheckComponent(canonical_file, /*is_file=*/true, ids, &verdict.warning);
  // Every folder above it, nearest first, up to and including /.
  std::string folder = canonical_file;
  while (verdict.refusal.empty() && folder != "/") {
    const size_t slash = folder.find_last_of('/');
    folder = slash == 0 ? "/" : folder.substr(0, slash);
    verdict.refusal = CheckComponent(folder, /*is_file=*/false, ids, &verdict.warning);
  }
  return verdict;
}

}  // namespace attnrt::core
