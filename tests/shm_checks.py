"""Where a tensor's bytes live: for the tests of batches handed over by DataLoader workers."""


def in_shared_memory(tensor) -> bool:
    """Whether `tensor`'s bytes lie in a shared mapping of /dev/shm (torch's segments and the worker ring's
    slots), read from /proc/self/maps."""
    address = tensor.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return fields[1].endswith("s") and len(fields) > 5 and fields[5].startswith("/dev/shm/")
    return False
