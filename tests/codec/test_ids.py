from shmq.codec import ids


def test_offset_ids_round_trip():
    assert ids.parse_offset_msg_id(ids.offset_msg_id(5, 123456789)) == (5, 123456789)
    assert ids.offset_msg_ids(5, [123456789, 7]) == [ids.offset_msg_id(5, 123456789), ids.offset_msg_id(5, 7)]


def test_uniq_keys_are_unique_per_generator_and_process():
    gen = ids.UniqKeyGenerator()
    keys = [gen.next() for _ in range(1000)] + gen.next_block(1000).astype(str).tolist()
    assert len(set(keys)) == 2000 and all(len(k) == 32 for k in keys)
    assert ids.UniqKeyGenerator().next()[:16] != gen.next()[:16]
