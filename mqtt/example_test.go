package mqtt_test

import (
	"fmt"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
)

func ExampleTopicToNative() {
	for _, name := range []string{"sensors/room1/temp", "home/living room/temp", "a//b", "$SYS/load"} {
		native, _ := mqtt.TopicToNative(name)
		back, _ := mqtt.TopicFromNative(native)
		fmt.Printf("%s -> %s -> %s\n", name, native, back)
	}
	// Output:
	// sensors/room1/temp -> sensors.room1.temp -> sensors/room1/temp
	// home/living room/temp -> home.:living:20room.temp -> home/living room/temp
	// a//b -> a.:.b -> a//b
	// $SYS/load -> $SYS.load -> $SYS/load
}

func ExampleParseFilter() {
	f, _ := mqtt.ParseFilter("$share/workers/jobs/+/#")
	fmt.Println(f.Filter, f.Group, f.Patterns)
	// Output:
	// jobs/+/# workers [jobs.* jobs.*.#]
}

func ExamplePublish_AppendTo() {
	p, _ := mqtt.EncodePublish(packets.Packet{
		FixedHeader: packets.FixedHeader{Qos: 1},
		TopicName:   "a/b",
		Payload:     []byte("hi"),
	}, mqtt.Version311)
	var buf []byte
	for id := uint16(1); id <= 2; id++ {
		buf = p.AppendTo(buf[:0], mqtt.Delivery{QoS: 1, PacketID: id})
		fmt.Printf("% x\n", buf)
	}
	// Output:
	// 32 09 00 03 61 2f 62 00 01 68 69
	// 32 09 00 03 61 2f 62 00 02 68 69
}
