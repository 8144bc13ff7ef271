// Stand-ins for the 6 symbols that the manylinux_2_39 builds of ml-metadata and
// tensorflow-data-validation 1.21 import but glibc 2.36 / libstdc++ 12 (Debian 12)
// do not define.  elf_weaken_versions.py makes those imports unversioned, and
// build_wheelhouse.sh adds this library as a DT_NEEDED of each extension, so the
// loader binds them here.  On a host that has the real symbols (newer glibc /
// libstdc++), those are found first in the global scope and this shim is unused.
//
// Build: g++ -O2 -shared -fPIC -o libtablegen_glibc_shim.so glibc_shim.cc
#include <cstdlib>
#include <exception>

extern "C" {

// glibc 2.38 (C23): identical to the classic functions except that they also
// accept a "0b"/"0B" prefix for base 2 / base 0.  The extensions parse decimal
// numbers in config/protos, so forwarding is enough.
long __isoc23_strtol(const char* s, char** end, int base) { return std::strtol(s, end, base); }
unsigned long __isoc23_strtoul(const char* s, char** end, int base) { return std::strtoul(s, end, base); }
long long __isoc23_strtoll(const char* s, char** end, int base) { return std::strtoll(s, end, base); }
unsigned long long __isoc23_strtoull(const char* s, char** end, int base) { return std::strtoull(s, end, base); }

// libstdc++ 14 (CXXABI_1.3.15): called by the unwinder when an exception leaves a
// noexcept function.  Same behaviour as GCC 14: enter the catch (so
// std::current_exception() works in the terminate handler), then terminate.
void* __cxa_begin_catch(void*) noexcept;
void __cxa_call_terminate(void* ue_header) noexcept {
  if (ue_header) __cxa_begin_catch(ue_header);
  std::terminate();
}

}  // extern "C"

namespace std {
// libstdc++ 13 (GLIBCXX_3.4.32): GCC >= 13 objects that use <iostream> call this
// to make sure the standard streams are constructed.  libstdc++ 12 constructs
// them itself when it is loaded (ios_init.cc), so there is nothing to do.
void ios_base_library_init() {}
}  // namespace std
