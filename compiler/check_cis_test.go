package compiler

import (
	"strings"
	"testing"
)

// TestCISProfile checks that every setting that breaks a CIS item is
// reported where it is written, only with --profile cis, and that a
// waiver turns it into a warning at the waiver.
func TestCISProfile(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		profile    []string // "code path" lines expected with --profile cis
		plain      []string // expected without a profile
	}{
		{"defaults", ``, nil, nil},
		{"anonymous auth", `security: anonymousAuth: true`,
			[]string{"KC1501 security.anonymousAuth breaks CIS 1.2.1"}, nil},
		{"plugins", `security: admission: plugins: ["AlwaysAdmit"]`,
			[]string{"KC1501 security.admission.plugins breaks CIS 1.2.3", "KC1501 security.admission.plugins breaks CIS 1.2.10",
				"KC1501 security.admission.plugins breaks CIS 1.2.14"}, nil},
		{"audit off", `security: audit: enabled: false`,
			[]string{"KC1501 security.audit.enabled breaks CIS 1.2.16", "KC1501 security.audit.enabled breaks CIS 3.2.1"}, nil},
		{"audit short", `security: audit: {maxAgeDays: 7, maxBackups: 2, maxSizeMB: 10}`,
			[]string{"KC1501 security.audit.maxAgeDays breaks CIS 1.2.17", "KC1501 security.audit.maxBackups breaks CIS 1.2.18",
				"KC1501 security.audit.maxSizeMB breaks CIS 1.2.19"}, nil},
		{"encryption off", `security: encryptionAtRest: enabled: false`,
			[]string{"KC1501 security.encryptionAtRest.enabled breaks CIS 1.2.27"}, nil},
		{"aesgcm", `security: encryptionAtRest: provider: "aesgcm"`,
			[]string{"KC1501 security.encryptionAtRest.provider breaks CIS 1.2.28"}, nil},
		{"privileged pods", `security: admission: podSecurity: "privileged"`,
			[]string{"KC1501 security.admission.podSecurity breaks CIS 5.2.2"}, nil},
		{"waived", `security: {anonymousAuth: true, cis: waivers: "1.2.1": reason: "TCP checks impossible"}`,
			[]string{`KC1502 security.cis.waivers."1.2.1" CIS 1.2.1 is waived`},
			[]string{`KC1502 security.cis.waivers."1.2.1" CIS 1.2.1 is waived`}},
		{"unused waiver", `security: cis: waivers: "4.2.7": reason: "node names"`,
			[]string{`KC1503 security.cis.waivers."4.2.7" the waiver of CIS 4.2.7 relaxes nothing`},
			[]string{`KC1503 security.cis.waivers."4.2.7" the waiver of CIS 4.2.7 relaxes nothing`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, run := range []struct {
				profile string
				want    []string
			}{{ProfileCIS, tc.profile}, {"", tc.plain}} {
				src := Source{Dir: "../examples/ha-stacked", Profile: run.profile}
				if tc.spec != "" {
					src.Overlay = map[string][]byte{"cis.cue": []byte("package cluster\n\n" + tc.spec + "\n")}
				}
				_, diags := Compile(src)
				var got []string
				for _, d := range diags {
					if !strings.HasPrefix(d.Code, "KC15") {
						t.Errorf("profile %q: unexpected %s", run.profile, line(d))
						continue
					}
					if len(d.Positions) == 0 || !strings.HasSuffix(d.Positions[0].File, "cis.cue") {
						t.Errorf("profile %q: %s is not reported where the setting is written: %v", run.profile, line(d), d.Positions)
					}
					got = append(got, d.Code+" "+d.Path+" "+d.Message)
				}
				if len(got) != len(run.want) {
					t.Fatalf("profile %q: got\n%s\nwant\n%s", run.profile, strings.Join(got, "\n"), strings.Join(run.want, "\n"))
				}
				for _, w := range run.want {
					found := false
					for _, g := range got {
						found = found || strings.HasPrefix(g, w)
					}
					if !found {
						t.Errorf("profile %q: no %q in\n%s", run.profile, w, strings.Join(got, "\n"))
					}
				}
			}
		})
	}
}
