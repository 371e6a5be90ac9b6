"""How glibc serves this script's large allocations: prints how many of ten 2 MB blocks got
their own mapping. Under plain python, once a 2 MB block was freed, glibc's dynamic threshold
serves the next ones from the heap: 0. A profiler that changes that changes the script's speed."""
import ctypes


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
first = bytearray(2 << 20)
del first  # raises glibc's mapping threshold past 2 MB, as under any long-running program
before = mallinfo2().hblks
blocks = [bytearray(2 << 20) for _ in range(10)]
print("mapped", mallinfo2().hblks - before)
