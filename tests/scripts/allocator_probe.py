"""How glibc serves this script's large allocations: prints how many of ten 8 MB blocks got
their own mapping. Under plain python, once a 24 MB block was freed, glibc's dynamic threshold
(raised to the size of the largest mapped block freed) serves the next, smaller ones from the
heap: 0. A profiler that fixes the threshold changes the script's speed. (Blocks of the freed
block's own size sat on the threshold's edge: one CI machine mapped them under plain python.)"""
import ctypes


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
first = bytearray(24 << 20)
del first  # raises glibc's mapping threshold to 24 MB, as under any long-running program
before = mallinfo2().hblks
blocks = [bytearray(8 << 20) for _ in range(10)]
print("mapped", mallinfo2().hblks - before)
